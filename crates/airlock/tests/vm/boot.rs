use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use airlock_protocol::ExitStatus;

use super::{boot, exec, guest_user};

#[test]
fn vm_guest_runs_its_own_kernel_through_the_serial_channel() {
    let Some(vm) = boot(&[], guest_user(1000, 1000)) else {
        return;
    };
    let started = Instant::now();
    let (status, out, err) = exec(&vm, &["uname", "-r"], None);
    let exec_wall = started.elapsed();
    assert_eq!(status, ExitStatus::Code(0), "stderr: {err}");
    assert_eq!(out.trim(), vm.kernel.release);
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(
        out.trim(),
        host_release.trim(),
        "the command ran on the host's kernel"
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let host = host.trim();
    eprintln!(
        "vm (tcg): guest uptime at hello {} ms, spawn to hello {} ms (boot call {:?}), uname exec {:?}; host kernel {host}",
        vm.machine.hello.uptime_ms, vm.machine.spawn_to_hello_ms, vm.boot_wall, exec_wall
    );
    let started = Instant::now();
    let (status, _, _) = exec(&vm, &["true"], None);
    let true_wall = started.elapsed();
    assert_eq!(status, ExitStatus::Code(0));
    eprintln!("vm (tcg): exec of `true` on the booted guest {true_wall:?}");
    // The command ran as the unprivileged guest user.
    let (_, id, _) = exec(&vm, &["id", "-u"], None);
    assert_eq!(id.trim(), "1000");
    assert!(
        !vm.machine.shutdown(Duration::from_secs(20)),
        "QEMU had to be killed"
    );
}

#[test]
fn vm_workspace_is_shared_at_the_same_path_and_guest_writes_reach_the_host() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("from-host"), "hello from the host\n").unwrap();
    let owner = std::fs::metadata(ws.path()).unwrap();
    let user = guest_user(owner.uid(), owner.gid());
    let Some(vm) = boot(&[(ws.path().to_path_buf(), true)], user) else {
        return;
    };
    let path = ws.path().display().to_string();
    let (status, out, err) = exec(&vm, &["cat", "from-host"], Some(&path));
    assert_eq!(status, ExitStatus::Code(0), "stderr: {err}");
    assert_eq!(out, "hello from the host\n");
    let (status, _, err) = exec(
        &vm,
        &["sh", "-c", "echo from the guest > from-guest"],
        Some(&path),
    );
    assert_eq!(status, ExitStatus::Code(0), "stderr: {err}");
    let written = ws.path().join("from-guest");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "from the guest\n"
    );
    let meta = std::fs::metadata(&written).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (owner.uid(), owner.gid()),
        "the guest's file is not the invoker's"
    );
    assert!(
        !vm.machine.shutdown(Duration::from_secs(20)),
        "QEMU had to be killed"
    );
}

#[test]
fn vm_guest_sees_no_kvm_and_no_host_devices() {
    let Some(vm) = boot(&[], guest_user(1000, 1000)) else {
        return;
    };
    let (_, out, _) = exec(&vm, &["ls", "-1", "/dev"], None);
    let mut nodes: Vec<&str> = out.lines().collect();
    nodes.sort_unstable();
    assert_eq!(
        nodes,
        [
            "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
            "tty", "urandom", "zero"
        ]
    );
    // The root of the guest cannot reach the host's devices either (it has none to reach).
    let (status, _, _) = exec(&vm, &["test", "-e", "/dev/kvm"], None);
    assert_eq!(status, ExitStatus::Code(1));
    assert!(
        !vm.machine.shutdown(Duration::from_secs(20)),
        "QEMU had to be killed"
    );
}

#[test]
fn vm_killing_the_monitor_ends_the_running_command_stream_instead_of_hanging() {
    let Some(vm) = boot(&[], guest_user(1000, 1000)) else {
        return;
    };
    let stream = vm.machine.open().unwrap();
    let client = airlock_protocol::ExecClient::connect(stream, &vm.key).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let request = airlock_protocol::ExecRequest {
            argv: vec!["sleep".into(), "1000".into()],
            env: Default::default(),
            cwd: None,
            user: airlock_protocol::ExecUser::Sandbox,
            tty: None,
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let _ = done_tx.send(client.run(&request, None, &mut out, &mut err));
    });
    std::thread::sleep(Duration::from_secs(2));
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &vm.machine.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let result = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the command's stream still hangs 30 s after QEMU died");
    assert!(
        matches!(result, Err(airlock_protocol::ClientError::Closed)),
        "{result:?}"
    );
    assert!(vm.machine.open().is_err(), "a stream opened to a dead VM");
}

#[test]
fn vm_protected_paths_stay_read_only_and_root_is_refused_with_them() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
    let owner = std::fs::metadata(ws.path()).unwrap();
    let hooks = ws.path().join(".git/hooks").display().to_string();
    let Some(vm) = super::boot_with(
        &[(ws.path().to_path_buf(), true)],
        guest_user(owner.uid(), owner.gid()),
        None,
        vec![hooks.clone()],
    ) else {
        return;
    };
    let path = ws.path().display().to_string();
    let (status, _, err) = exec(
        &vm,
        &["sh", "-c", "echo planted > .git/hooks/pre-commit"],
        Some(&path),
    );
    assert_ne!(status, ExitStatus::Code(0), "a hook was planted");
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!ws.path().join(".git/hooks/pre-commit").exists());
    // The rest of the workspace stays writable.
    let (status, _, err) = exec(&vm, &["touch", "ok"], Some(&path));
    assert_eq!(status, ExitStatus::Code(0), "stderr: {err}");
    // Root could remount the hooks writable: it is not served.
    let stream = vm.machine.open().unwrap();
    let client = airlock_protocol::ExecClient::connect(stream, &vm.key).unwrap();
    let request = airlock_protocol::ExecRequest {
        argv: vec!["mount".into(), "-o".into(), "remount,rw".into(), hooks],
        env: Default::default(),
        cwd: None,
        user: airlock_protocol::ExecUser::Root,
        tty: None,
    };
    let result = client.run(&request, None, &mut Vec::new(), &mut Vec::new());
    assert!(
        matches!(&result, Err(airlock_protocol::ClientError::Remote(e)) if e.code == airlock_protocol::ErrorCode::RootNotAllowed),
        "{result:?}"
    );
    assert!(
        !vm.machine.shutdown(Duration::from_secs(20)),
        "QEMU had to be killed"
    );
}

#[test]
fn vm_guest_sees_the_memory_and_cpus_it_was_given() {
    let host = airlock_vm::limits::Host::current().unwrap();
    let limits = airlock_vm::limits::Limits::new(384, Some(2.0), host).unwrap();
    let Some(vm) = super::boot_sized(&[], guest_user(1000, 1000), None, Vec::new(), limits) else {
        return;
    };
    let (status, nproc, err) = exec(&vm, &["nproc"], None);
    assert_eq!(status, ExitStatus::Code(0), "stderr: {err}");
    assert_eq!(nproc.trim(), limits.vcpus.to_string());
    assert_eq!(limits.vcpus, host.cpus.min(2));
    let (_, meminfo, _) = exec(&vm, &["cat", "/proc/meminfo"], None);
    let total_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no MemTotal in the guest's /proc/meminfo: {meminfo}"));
    // The guest kernel keeps some of its RAM for itself: MemTotal is a little below the size.
    assert!(
        (384 * 1024 * 3 / 4..=384 * 1024).contains(&total_kb),
        "the guest has {total_kb} kB, not about 384 MiB"
    );
    eprintln!(
        "vm: guest MemTotal {total_kb} kB of 384 MiB, nproc {}",
        nproc.trim()
    );
    assert!(
        !vm.machine.shutdown(Duration::from_secs(20)),
        "QEMU had to be killed"
    );
}
