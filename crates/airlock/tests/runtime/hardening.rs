//! Issue 9, findings 6 and 12 (tier T3): nothing a sandbox writes may carry a setuid/setgid bit
//! or a file capability to the host, and sockets of families no namespace isolates cannot be made.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::harness::ok;
#[allow(unused_imports)]
use super::harness::Rt;

/// Every path below `dir` (not following links) whose mode has `S_ISUID` or `S_ISGID`.
fn setid_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let meta = entry.path().symlink_metadata().expect("lstat");
            if meta.permissions().mode() & 0o6000 != 0 {
                found.push(format!(
                    "{} {:o}",
                    entry.path().display(),
                    meta.permissions().mode()
                ));
            }
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found
}

/// Files below `dir` that carry a `security.capability` extended attribute (read on the host).
fn files_with_capabilities(dir: &Path) -> String {
    let code = "import os, sys\nfor r, ds, fs in os.walk(sys.argv[1]):\n for n in fs + ds:\n  p = os.path.join(r, n)\n  if 'security.capability' in os.listxattr(p, follow_symlinks=False): print(p)";
    let out = Command::new("python3")
        .args(["-c", code])
        .arg(dir)
        .output()
        .expect("python3 on the host");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An archive holding a setuid and a setgid file, written on the host.
fn setid_archive(path: &Path) {
    let code = "import io, sys, tarfile\nwith tarfile.open(sys.argv[1], 'w') as t:\n for name, mode in (('tar-suid', 0o4755), ('tar-sgid', 0o2755)):\n  i = tarfile.TarInfo(name); i.mode = mode; i.size = 3\n  t.addfile(i, io.BytesIO(b'hi\\n'))";
    let status = Command::new("python3")
        .args(["-c", code])
        .arg(path)
        .status()
        .expect("python3 on the host");
    assert!(status.success());
}

const SETID_SCRIPT: &str = r#"cd setid || exit 1
cp /bin/sh sh-chmod; chmod 4755 sh-chmod; chmod g+s sh-chmod
install -m 4755 /bin/sh sh-install
tar -xpf ../setid.tar
mkdir dir-sgid; chmod 2775 dir-sgid
python3 -c 'import os; os.close(os.open("py-open", os.O_CREAT | os.O_WRONLY, 0o4755))'
python3 -c 'import os; open("py-chmod", "w").close(); os.chmod("py-chmod", 0o6755)'
python3 -c 'import os; os.mknod("py-mknod", 0o102755)'
python3 -c 'import os, struct
blob = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)
try:
    os.setxattr("sh-chmod", "security.capability", blob); print("xattr-set")
except OSError as e: print("xattr-refused", e.errno)'
echo done"#;

both! {
    /// 9.6: `chmod 4755`, `install -m 4755`, `tar -xp` of an archive with setuid/setgid files,
    /// Python `os.open(…, 0o4755)`, `os.chmod`, `os.mknod` and a setgid directory, as the sandbox
    /// user and as in-sandbox root: the host finds no setuid or setgid bit and no file
    /// capability in the workspace.
    fn setuid_bits_and_file_capabilities_never_reach_the_host(rt) {
        setid_archive(&rt.project.join("setid.tar"));
        rt.hand_over(&rt.project);
        for opts in [&[][..], rt.most_privileged()] {
            let dir = rt.project.join("setid");
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).unwrap();
            rt.hand_over(&dir);
            let run = rt.sh(opts, SETID_SCRIPT);
            assert!(run.stdout.ends_with("done\n"), "{opts:?}: {run:?}");
            assert!(dir.join("sh-chmod").exists(), "the script did not run: {run:?}");
            assert!(dir.join("py-chmod").exists(), "the script did not run: {run:?}");
            assert!(!run.stdout.contains("xattr-set"), "{opts:?}: {run:?}");
            assert_eq!(setid_files(&rt.project), Vec::<String>::new(), "{opts:?}: {run:?}");
            assert_eq!(files_with_capabilities(&rt.project), "", "{opts:?}");
        }
    }
}

both! {
    /// 9.12: sockets of families other than Unix, IPv4, IPv6 and netlink fail with
    /// EAFNOSUPPORT (vsock reaches the hypervisor, packet sockets bypass the proxy), for the
    /// sandbox user and in-sandbox root, with `socket` and `socketpair`.
    fn socket_families_no_namespace_isolates_are_refused(rt) {
        let code = r#"import socket
for name, fam, kind in (("AF_VSOCK", 40, 1), ("AF_PACKET", 17, 3), ("AF_XDP", 44, 3), ("AF_ALG", 38, 5), ("AF_KEY", 15, 3), ("AF_TIPC", 30, 2), ("AF_RDS", 21, 5), ("AF_UNIX", 1, 1), ("AF_INET", 2, 1), ("AF_INET6", 10, 1), ("AF_NETLINK", 16, 3)):
    try:
        socket.socket(fam, kind).close(); print(name, "created")
    except OSError as e:
        print(name, e.errno)
try:
    socket.socketpair(40, 1); print("pair created")
except OSError as e:
    print("pair", e.errno)"#;
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, &format!("python3 -c '{code}'"));
            let out = ok(&run);
            for allowed in ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"] {
                assert!(out.contains(&format!("{allowed} created\n")), "{opts:?}: {out}");
            }
            for denied in ["AF_VSOCK", "AF_PACKET", "AF_XDP", "AF_ALG", "AF_KEY", "AF_TIPC", "AF_RDS", "pair"] {
                assert!(out.contains(&format!("{denied} 97\n")), "{denied} with {opts:?}: {out}");
            }
        }
    }
}

/// `stat -f` of the writable tmpfs mounts: total size in MiB of `/` (which holds `/tmp`, `$HOME`
/// and, on the same tmpfs, the overlay upper layers), `/dev/shm` and `/dev`.
const TMPFS_TOTAL_MIB: &str = r#"total=0
for m in / /dev/shm /dev; do
  set -- $(stat -f -c '%b %S' "$m"); total=$((total + $1 * $2))
done
echo "total $((total / 1048576))""#;

fn tmpfs_total_mib(out: &str) -> u64 {
    let line = out.lines().find(|l| l.starts_with("total ")).expect(out);
    line["total ".len()..].parse().expect(out)
}

both! {
    /// 9.10: the sandbox's tmpfs mounts together stay within `memory_mb` (as the unprivileged
    /// user without delegated cgroups, with the default limit: before, `/` and `/dev/shm` were
    /// each half of host RAM); with `memory_mb = 256`, writing 300 MiB to /tmp fails with ENOSPC
    /// instead of filling host RAM (run where an explicit memory limit is enforceable).
    fn tmpfs_writes_stay_within_memory_mb(rt) {
        const DEFAULT_MEMORY_MB: u64 = 8192; // airlock_config::values::DEFAULT_MEMORY_MB
        let run = rt.sh(&[], TMPFS_TOTAL_MIB);
        let total = tmpfs_total_mib(ok(&run));
        assert!(total <= DEFAULT_MEMORY_MB, "tmpfs mounts total {total} MiB: {run:?}");
        if !rt.is_root() {
            return; // an explicit memory_mb without cgroups is refused (tested in cli)
        }
        rt.env.write_user_config("memory_mb = 256\n");
        rt.hand_over(rt.env.root());
        let script = format!("{TMPFS_TOTAL_MIB}\ndd if=/dev/zero of=/tmp/fill bs=1M count=300 2>&1 | head -1; rm -f /tmp/fill; echo done");
        let run = rt.sh(&[], &script);
        let out = ok(&run);
        assert!(tmpfs_total_mib(out) <= 256, "{run:?}");
        assert!(out.contains("No space left on device"), "{run:?}");
        assert!(out.ends_with("done\n"), "{run:?}");
    }
}

both! {
    /// 9.10: a fork loop stops at `pids_max`, also for the unprivileged user without delegated
    /// cgroups (RLIMIT_NPROC, counted per sandbox), and the run can still finish.
    fn fork_loop_stops_at_pids_max(rt) {
        rt.env.write_user_config("pids_max = 32\n");
        rt.hand_over(rt.env.root());
        let code = r#"import os, signal, time
kids = []
err = None
while len(kids) < 200:
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
print("forked", len(kids), "errno", err)"#;
        let run = rt.sh(&[], &format!("python3 -c '{code}'"));
        let out = ok(&run);
        let fields: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(fields.first(), Some(&"forked"), "{run:?}");
        let forked: u32 = fields[1].parse().unwrap();
        assert!(forked < 32, "{forked} processes started under pids_max = 32: {run:?}");
        assert_eq!(fields[3], "11", "fork failed with another errno: {run:?}");
    }
}

both! {
    /// 9.10: sandbox processes (user and in-sandbox root) are the OOM killer's choice before the
    /// guest's PID 1: their `oom_score_adj` is higher than PID 1's.
    fn sandbox_processes_are_chosen_by_the_oom_killer_before_pid1(rt) {
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'; cat /proc/1/oom_score_adj");
            let values: Vec<i32> = ok(&run).lines().map(|l| l.trim().parse().unwrap()).collect();
            assert_eq!(values.len(), 3, "{run:?}");
            assert!(values[0] > values[2] && values[1] > values[2], "{opts:?}: {values:?}");
            assert!(values[0] > 0, "{values:?}");
        }
    }
}

/// The capability sets and `no_new_privs` of the process that runs the script.
const CAPS_SCRIPT: &str = "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status";

/// `(name, value)` of each line `CAPS_SCRIPT` printed; every one of the six must be there.
fn cap_lines(out: &str) -> Vec<(String, u64)> {
    let lines: Vec<(String, u64)> = out
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(':').expect(out);
            (k.to_owned(), u64::from_str_radix(v.trim(), 16).expect(out))
        })
        .collect();
    assert_eq!(lines.len(), 6, "{out}");
    lines
}

/// I6 for a sandbox-user process: every capability set empty (the bounding set too, so no
/// later exec gains any) and `no_new_privs`.
fn assert_unprivileged(out: &str, what: &str) {
    for (key, value) in cap_lines(out) {
        let want = u64::from(key == "NoNewPrivs");
        assert_eq!(value, want, "{what}: {key} in\n{out}");
    }
}

both! {
    /// I6: a command started by `run`, and one started by `exec` in a persistent sandbox, holds
    /// no capability in any set (inheritable, permitted, effective, bounding, ambient) and has
    /// `no_new_privs`; a `--root` command (where available) keeps its capabilities but
    /// `CAP_SETFCAP`, bounding set included, also with `no_new_privs`.
    fn sandbox_processes_hold_no_capabilities_and_no_new_privs(rt) {
        assert_unprivileged(ok(&rt.sh(&[], CAPS_SCRIPT)), "run");
        ok(&rt.run_args(&["up", "--no-attach"], None));
        let exec = rt.run_args(&["exec", "--", "sh", "-c", CAPS_SCRIPT], None);
        assert_unprivileged(ok(&exec), "exec");
        if rt.root_available() {
            let root = rt.run_args(&["exec", "--root", "--", "sh", "-c", CAPS_SCRIPT], None);
            const SETFCAP: u64 = 1 << 31;
            const CHOWN: u64 = 1;
            for (key, value) in cap_lines(ok(&root)) {
                match key.as_str() {
                    "NoNewPrivs" => assert_eq!(value, 1, "exec --root"),
                    "CapInh" | "CapAmb" => assert_eq!(value, 0, "exec --root: {key}"),
                    _ => assert_eq!(value & (SETFCAP | CHOWN), CHOWN, "exec --root: {key} {value:x}"),
                }
            }
        }
        ok(&rt.run_args(&["down"], None));
    }
}
