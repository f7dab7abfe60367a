//! One test per attack class of issue 3 item 7 (tier T3). Each names the attack it blocks.

use std::io::Read;
use std::net::TcpListener;

use super::harness::ok;
#[allow(unused_imports)]
use super::harness::Rt;

/// A Python one-liner runner inside the sandbox (python3 is part of the host image here).
fn py(code: &str) -> String {
    format!("python3 -c '{code}'")
}

both! {
    /// /etc/shadow, /etc/gshadow and the host's machine-id cannot be read, even by in-sandbox
    /// root (for a root invoker the sandbox user is host root on disk, so only the mask helps).
    fn etc_secrets_are_masked(rt) {
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, "cat /etc/shadow /etc/gshadow 2>&1 | wc -c; cat /etc/machine-id");
            let out = ok(&run);
            let mut lines = out.lines();
            assert_eq!(lines.next(), Some("0"), "shadow readable with {opts:?}: {out}");
            let host_id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
            let inside = lines.next().unwrap_or_default();
            assert_eq!(inside.len(), 32, "machine-id missing: {out}");
            assert_ne!(inside, host_id.trim(), "host machine-id visible");
        }
    }
}

both! {
    /// Host paths outside the mappings are invisible, including the test world's other
    /// directories next to the project and through /proc/1/root.
    fn host_paths_outside_mappings_are_unreachable(rt) {
        let outside = rt.env.dir("not-mapped");
        rt.env.write(&outside.join("secret"), "host secret");
        let script = format!(
            "cat {0}/secret; ls /proc/1/root/ 2>&1 >/dev/null | head -1; \
             cat /proc/1/root{0}/secret; echo tried-both",
            outside.display()
        );
        let run = rt.sh(rt.most_privileged(), &script);
        // The witness line proves the script ran inside: a run that never started sees nothing.
        assert!(ok(&run).ends_with("tried-both\n"), "{run:?}");
        assert!(!run.stdout.contains("host secret"), "{run:?}");
    }
}

both! {
    /// Host processes are invisible: the sandbox's /proc lists only its own few processes.
    fn host_processes_are_invisible(rt) {
        let run = rt.sh(&[], "ls /proc | grep -c '^[0-9]'");
        let count: u32 = ok(&run).trim().parse().unwrap();
        assert!(count <= 5, "{count} processes visible");
        let script = format!("test -e /proc/{}/cmdline && echo visible || echo hidden", std::process::id());
        let run = rt.sh(&[], &script);
        assert_eq!(ok(&run), "hidden\n", "the test runner is visible");
    }
}

both! {
    /// A service listening on the host's loopback cannot be reached from inside.
    fn host_loopback_services_are_unreachable(rt) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let code = format!(
            "import socket; s=socket.socket(); s.settimeout(2)\ntry:\n s.connect((\"127.0.0.1\",{port})); print(\"connected\")\nexcept OSError as e: print(\"refused\", e.errno)"
        );
        let run = rt.sh(&[], &py(&code));
        assert!(ok(&run).starts_with("refused"), "{run:?}");
        assert!(listener.accept().is_err(), "the host listener got a connection");
    }
}

both! {
    /// Denied syscalls fail with EPERM/ENOSYS for the sandbox user and for in-sandbox root:
    /// new user namespaces, keyrings, bpf, perf_event_open, userfaultfd, mount.
    fn dangerous_syscalls_are_denied(rt) {
        // Numbers of the native architecture, from libc (keyctl, add_key, bpf,
        // perf_event_open, userfaultfd, open_by_handle_at, kexec_load, init_module).
        let numbers = [
            libc::SYS_keyctl,
            libc::SYS_add_key,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_userfaultfd,
            libc::SYS_open_by_handle_at,
            libc::SYS_kexec_load,
            libc::SYS_init_module,
        ]
        .map(|n| n.to_string())
        .join(",");
        let code = &format!("import ctypes; l=ctypes.CDLL(None, use_errno=True)\nfor n in ({numbers}):\n r=l.syscall(n,0,0,0,0,0); print(n, r, ctypes.get_errno())");
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, &format!("{}; unshare -U true && echo userns-allowed; mount -t tmpfs x /mnt && echo mount-allowed", py(code)));
            assert!(!run.stdout.contains("allowed"), "{opts:?}: {run:?}");
            for line in run.stdout.lines().filter(|l| !l.is_empty()) {
                let f: Vec<i64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
                assert_eq!(f[1], -1, "syscall {} succeeded with {opts:?}", f[0]);
                assert!(f[2] == 1 || f[2] == 38, "syscall {} failed with errno {}", f[0], f[2]);
            }
            assert_eq!(run.stdout.lines().count(), 8, "{run:?}");
        }
    }
}

both! {
    /// Terminal injection: TIOCSTI into a terminal is refused, even on the process's own
    /// controlling terminal (which the kernel would otherwise allow with legacy_tiocsti=1).
    fn terminal_injection_ioctls_are_denied(rt) {
        let code = "import os, pty, fcntl, termios\nm, s = pty.openpty(); name = os.ttyname(s)\npid = os.fork()\nif pid == 0:\n os.setsid(); fd = os.open(name, os.O_RDWR)\n try:\n  fcntl.ioctl(fd, termios.TIOCSTI, b\"x\"); print(\"injected\", flush=True)\n except OSError as e: print(\"denied\", e.errno, flush=True)\n os._exit(0)\nos.waitpid(pid, 0)";
        let run = rt.sh(&[], &py(code));
        assert!(ok(&run).starts_with("denied"), "{run:?}");
    }
}

both! {
    /// Writes to /proc as in-sandbox root fail (kernel tunables are read-only, even those of
    /// the sandbox's own namespaces), and masked /proc files that exist on this kernel read empty.
    fn proc_writes_and_sensitive_reads_fail_even_as_root(rt) {
        let run = rt.sh(
            rt.most_privileged(),
            // Network tunables belong to the sandbox's own network namespace, so in-sandbox
            // root could change them if /proc/sys were writable.
            "echo 33 > /proc/sys/net/ipv4/ip_default_ttl && echo sysctl-written; \
             echo h > /proc/sysrq-trigger && echo sysrq-written; true",
        );
        assert!(!ok(&run).contains("written"), "{run:?}");
        let masked: Vec<&str> = ["kcore", "keys", "timer_list", "sysrq-trigger", "sched_debug"]
            .into_iter()
            .filter(|f| std::path::Path::new("/proc").join(f).exists())
            .collect();
        assert!(!masked.is_empty(), "this kernel has none of the masked /proc files");
        let script: String = masked.iter().map(|f| format!("cat /proc/{f} | wc -c;")).collect();
        let run = rt.sh(rt.most_privileged(), &script);
        let sizes: Vec<&str> = ok(&run).split_whitespace().collect();
        assert_eq!(sizes, vec!["0"; masked.len()], "masked /proc files have content: {masked:?}");
    }
}

both! {
    /// System-directory writes (as in-sandbox root where available) stay inside the sandbox:
    /// the host's /usr and /etc are unchanged, and a second sandbox does not see them either.
    fn system_directory_writes_never_reach_the_host(rt) {
        let name = format!("airlock-probe-{}-{}", std::process::id(), rt.uid());
        let script = format!("echo x > /usr/bin/{name} && echo usr-ok; echo x > /etc/{name} && echo etc-ok; echo done");
        let run = rt.sh(rt.most_privileged(), &script);
        assert!(ok(&run).contains("done"));
        if rt.is_root() {
            // I2: root invokers get fully writable system directories (inside).
            assert!(run.stdout.contains("usr-ok") && run.stdout.contains("etc-ok"), "{run:?}");
        }
        assert!(!std::path::Path::new(&format!("/usr/bin/{name}")).exists());
        assert!(!std::path::Path::new(&format!("/etc/{name}")).exists());
        let again = rt.sh(&[], &format!("test -e /usr/bin/{name} && echo persisted; true"));
        assert!(!ok(&again).contains("persisted"));
    }
}

both! {
    /// A descriptor leaked into airlock by its caller never reaches the sandbox, and PID 1's
    /// descriptors (control socket) cannot be opened through /proc.
    fn leaked_host_descriptors_do_not_reach_the_sandbox(rt) {
        let secret = rt.env.write(&rt.env.home.join("leaked-secret"), "leaked secret");
        let code = "import os\nfor fd in sorted(os.listdir(\"/proc/self/fd\")):\n  try: print(fd, os.readlink(\"/proc/self/fd/\" + fd))\n  except OSError as e: print(fd, \"?\")\nfds = []\ntry: fds = os.listdir(\"/proc/1/fd\")\nexcept OSError: pass\nfor fd in fds:\n  try: os.readlink(\"/proc/1/fd/\" + fd); print(\"pid1-fd-readable\", fd)\n  except OSError: pass\n  try: os.close(os.open(\"/proc/1/fd/\" + fd, os.O_RDONLY)); print(\"pid1-fd-opened\", fd)\n  except OSError: pass";
        // The shell opens fd 7 on the secret without close-on-exec and execs airlock with it.
        let mut args = vec!["-c".to_owned(), "exec 7<\"$0\"; exec \"$@\"".to_owned()];
        args.push(secret.to_string_lossy().into_owned());
        let airlock_cmd = rt.command(&rt.project, &["run", "--", "python3", "-c", code]);
        args.push(airlock_cmd.get_program().to_string_lossy().into_owned());
        args.extend(airlock_cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
        let mut cmd = std::process::Command::new("sh");
        cmd.args(&args).current_dir(&rt.project).env_clear();
        for (k, v) in airlock_cmd.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(!stdout.contains("leaked-secret"), "leaked fd reached the sandbox:\n{stdout}");
        assert!(!stdout.lines().any(|l| l.starts_with("7 ")), "fd 7 present:\n{stdout}");
        assert!(!stdout.contains("pid1-fd"), "PID 1's descriptors are reachable:\n{stdout}");
    }
}

both! {
    /// The airlock binary cannot be opened for writing (or at all) through /proc/1/exe, as the
    /// sandbox user and as in-sandbox root; /proc/1/root does not lead anywhere either.
    fn airlock_binary_is_unreachable_through_proc(rt) {
        let code = "import os\nfor p in (\"/proc/1/exe\", \"/proc/1/root/etc/hostname\", \"/proc/1/cwd\"):\n  for mode in (os.O_RDONLY, os.O_WRONLY):\n    try: os.close(os.open(p, mode)); print(\"opened\", p, mode)\n    except OSError as e: print(\"refused\", p, e.errno)";
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, &py(code));
            let out = ok(&run);
            assert!(!out.contains("opened"), "{opts:?}: {out}");
            assert_eq!(out.lines().count(), 6, "{out}");
        }
        // The binary on the host is unchanged (no one could write it).
        let mut f = std::fs::File::open(crate::common::AIRLOCK).unwrap();
        let mut head = [0u8; 4];
        f.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"\x7fELF");
    }
}

both! {
    /// The device nodes in /dev (and the /dev/null masks in /proc) are the host's own inodes:
    /// changing their mode, owner or times from inside must fail (for a root invoker the sandbox
    /// user owns them on disk), while they stay usable. The attempted changes are no-ops, so the
    /// host is unharmed even if the guarantee were missing.
    fn host_device_nodes_cannot_be_modified(rt) {
        let script = "for f in /dev/null /dev/zero /dev/tty /dev/urandom /proc/keys; do \
                        chmod 666 $f 2>/dev/null && echo chmod-ok $f; \
                        touch -r $f $f 2>/dev/null && echo touch-ok $f; \
                      done; chown 0:0 /dev/null 2>/dev/null && echo chown-ok; \
                      echo x > /dev/null && head -c 3 /dev/zero | wc -c";
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, script);
            let out = ok(&run);
            assert!(!out.contains("-ok"), "host device node changed with {opts:?}: {out}");
            assert_eq!(out.trim(), "3", "devices unusable: {run:?}");
        }
    }
}

both! {
    /// Terminal injection into the *host* terminal: even when airlock runs on a terminal, a
    /// command started without `-t` holds no terminal descriptor (its stdio are pipes through the
    /// control channel) and has no controlling terminal, so there is nothing to TIOCSTI into.
    fn host_terminal_is_never_handed_to_the_sandbox(rt) {
        let script = "for fd in 0 1 2; do [ -t $fd ] && echo tty-fd-$fd; done; \
                      (exec 3</dev/tty) 2>/dev/null && echo has-ctty; echo done";
        let out = rt.on_a_terminal(&["run", "--", "sh", "-c", script]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("done"), "{stdout}");
        assert!(!stdout.contains("tty-fd") && !stdout.contains("has-ctty"), "{stdout}");
    }
}

both! {
    /// Host identifiers in firmware tables (ACPI, DMI, EFI variables under /sys/firmware) and the
    /// RAPL energy counters (a power side channel) are masked, as in Docker's default profile.
    fn firmware_tables_and_power_counters_are_masked(rt) {
        let masked = ["/sys/firmware", "/sys/devices/virtual/powercap", "/sys/class/powercap"];
        let present: Vec<&str> = masked
            .into_iter()
            .filter(|d| std::fs::read_dir(d).map(|mut e| e.next().is_some()).unwrap_or(false))
            .collect();
        assert!(!present.is_empty(), "this host exposes none of {masked:?}");
        let script: String = present.iter().map(|d| format!("ls -A {d} | wc -l;")).collect();
        let run = rt.sh(rt.most_privileged(), &script);
        let counts: Vec<&str> = ok(&run).split_whitespace().collect();
        assert_eq!(counts, vec!["0"; present.len()], "{present:?} visible: {run:?}");
    }
}
