//! One test per isolation guarantee of PRODUCT §5 (I1–I5, I9) that is not an attack class.

use super::harness::ok;
#[allow(unused_imports)]
use super::harness::Rt;

both! {
    /// I1: user, mount, pid, net, uts, ipc and cgroup namespaces all differ from the host's.
    fn every_namespace_differs_from_the_host(rt) {
        let kinds = ["user", "mnt", "pid", "net", "uts", "ipc", "cgroup"];
        let script: String = kinds.iter().map(|k| format!("readlink /proc/self/ns/{k};")).collect();
        let run = rt.sh(&[], &script);
        let inside: Vec<&str> = ok(&run).lines().collect();
        assert_eq!(inside.len(), kinds.len(), "{run:?}");
        for (kind, got) in kinds.iter().zip(inside) {
            let host = std::fs::read_link(format!("/proc/self/ns/{kind}")).unwrap();
            assert_ne!(got, host.to_string_lossy(), "{kind} namespace is the host's");
        }
    }
}

both! {
    /// I2: only the allowlisted system directories of the host exist; the directories that
    /// must start empty are empty (the host's /var, /srv, /mnt, /media, /run, /root, /home).
    fn only_allowlisted_host_directories_are_visible(rt) {
        let allowed = [
            "usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "home",
            "root", "var", "srv", "mnt", "media", "run", "tmp", "proc", "sys", "dev",
        ];
        let run = rt.sh(&[], "ls -A /; echo ---; ls -A /var /srv /mnt /media /run /home");
        let out = ok(&run);
        let (top, rest) = out.split_once("---").unwrap();
        for entry in top.lines() {
            assert!(allowed.contains(&entry), "host entry /{entry} is visible in the sandbox");
        }
        // `ls -A` of several dirs prints "dir:" headers and their entries: only the sandbox's
        // own `/var/tmp`, `/run/airlock` (the egress sockets, N1) and the parents of the
        // package manager's state (`/var/lib`, `/var/cache`, `/var/log`, P1) may appear.
        let mut dir = "";
        for line in rest.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(d) = line.strip_suffix(':') {
                dir = d;
                continue;
            }
            let own = matches!(
                (dir, line),
                ("/var", "tmp" | "lib" | "cache" | "log") | ("/run", "airlock")
            );
            assert!(own, "{dir} is not empty: {line:?}\n{rest}");
        }
        // Something that does exist at the host's root outside the allowlist stays invisible.
        for host_entry in std::fs::read_dir("/").unwrap().flatten() {
            let name = host_entry.file_name().to_string_lossy().into_owned();
            if !allowed.contains(&name.as_str()) {
                assert!(!top.lines().any(|l| l == name), "/{name} leaked");
            }
        }
    }
}

both! {
    /// I3: the workspace is at its host path and files written there belong to the invoker.
    fn workspace_is_at_its_host_path_and_writes_belong_to_the_invoker(rt) {
        let run = rt.sh(&[], "pwd; echo data > written-inside");
        assert_eq!(ok(&run).trim(), rt.project.to_string_lossy());
        let meta = std::fs::metadata(rt.project.join("written-inside")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(meta.uid(), rt.uid(), "file written inside is not the invoker's on the host");
    }
}

both! {
    /// I3: `$HOME` has the host home's path but is the sandbox's own, empty directory.
    fn home_has_the_host_path_but_none_of_its_files(rt) {
        rt.env.write(&rt.env.home.join("host-only-file"), "secret");
        let run = rt.sh(&[], "echo $HOME; ls -A \"$HOME\"; touch \"$HOME/inside\"");
        let out = ok(&run);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some(rt.env.home.to_string_lossy().as_ref()));
        assert!(!out.contains("host-only-file"), "host home content visible: {out}");
        assert!(!rt.env.home.join("inside").exists(), "sandbox home wrote to the host home");
    }
}

both! {
    /// I4: a fresh /proc (PID 1 is the sandbox's init), read-only /sys, minimal /dev.
    fn proc_sys_and_dev_are_the_sandbox_own(rt) {
        let run = rt.sh(
            &[],
            "tr '\\0' ' ' </proc/1/cmdline; echo; ls /dev | tr '\\n' ' '; echo; \
             grep -E ' /sys | /proc/sys ' /proc/self/mountinfo | awk '{print $5, $6}'",
        );
        let out = ok(&run);
        let mut lines = out.lines();
        assert!(lines.next().unwrap().contains("__init"), "{out}");
        let dev: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let expected = [
            "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
            "tty", "urandom", "zero",
        ];
        assert_eq!(dev, expected, "unexpected /dev entries");
        for mount in lines {
            let opts = mount.split_whitespace().nth(1).unwrap();
            assert!(opts.split(',').any(|o| o == "ro"), "{mount} is not read-only");
        }
    }
}

both! {
    /// I2, I4: every mask and device node is its own mount with the flags that make it harmless
    /// (a host inode inside must not be changeable, a mask must not run or open a device): the
    /// /etc masks `ro,nosuid,nodev`, the /proc masks and read-only /proc directories
    /// `ro,nosuid,nodev,noexec`, the device nodes `ro,nosuid,noexec`.
    fn masks_and_device_nodes_carry_their_mount_flags(rt) {
        let run = rt.sh(&[], "awk '{print $5, $6}' /proc/self/mountinfo");
        let out = ok(&run);
        let flags = |path: &str| -> Option<Vec<&str>> {
            out.lines()
                .rfind(|l| l.split_whitespace().next() == Some(path))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("").split(',').collect())
        };
        let expect = |path: &str, want: &[&str]| {
            let got = flags(path).unwrap_or_else(|| panic!("{path} is not a mount: {out}"));
            for w in want {
                assert!(got.contains(w), "{path} lacks {w}: {got:?}");
            }
        };
        for dev in ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"] {
            expect(dev, &["ro", "nosuid", "noexec"]);
        }
        let proc_masks: Vec<&str> = ["kcore", "keys", "timer_list", "sysrq-trigger", "sched_debug"]
            .into_iter()
            .filter(|f| std::path::Path::new("/proc").join(f).exists())
            .collect();
        assert!(!proc_masks.is_empty(), "this kernel has none of the masked /proc files");
        for f in proc_masks {
            expect(&format!("/proc/{f}"), &["ro", "nosuid", "nodev", "noexec"]);
        }
        for d in ["sys", "bus", "fs", "irq"] {
            if std::path::Path::new("/proc").join(d).is_dir() {
                expect(&format!("/proc/{d}"), &["ro", "nosuid", "nodev", "noexec"]);
            }
        }
        let etc_masks: Vec<&str> = ["shadow", "gshadow", "shadow-", "gshadow-"]
            .into_iter()
            .filter(|f| std::path::Path::new("/etc").join(f).exists())
            .collect();
        for f in &etc_masks {
            expect(&format!("/etc/{f}"), &["ro", "nosuid", "nodev"]);
        }
    }
}

both! {
    /// I2, I4: the directories airlock creates in the new root and the files it generates in
    /// /etc have exactly their modes. Pins the sandbox's view while the root is built with as
    /// few syscalls as possible (no check or chmod whose result is already known).
    fn skeleton_directories_and_generated_files_have_their_modes(rt) {
        let mut expected: Vec<String> = [
            "/ 755", "/home 755", "/root 700", "/var 755", "/var/tmp 1777", "/srv 755",
            "/mnt 755", "/media 755", "/run 755", "/tmp 1777", "/dev 755", "/dev/shm 1777",
        ]
        .map(String::from)
        .to_vec();
        for f in ["passwd", "group", "hostname", "hosts", "machine-id"] {
            if std::path::Path::new("/etc").join(f).exists() {
                expected.push(format!("/etc/{f} 644"));
            }
        }
        let paths: Vec<&str> = expected.iter().filter_map(|e| e.split(' ').next()).collect();
        let run = rt.sh(&[], &format!("stat -c '%n %a' {}", paths.join(" ")));
        let out = ok(&run);
        let got: Vec<&str> = out.lines().collect();
        assert_eq!(got, expected, "{out}");
    }
}

both! {
    /// I5: commands run as a non-root uid; `--root` is uid 0 of the sandbox's user namespace,
    /// mapped to a non-root host id (or refused with the reason when the host cannot map it).
    fn commands_run_unprivileged_and_root_is_only_namespaced(rt) {
        let run = rt.sh(&[], "id -u");
        assert_ne!(ok(&run).trim(), "0");
        let run = rt.sh(&["--root"], "id -u; cat /proc/self/uid_map");
        if rt.root_available() {
            let out = ok(&run);
            assert_eq!(out.lines().next(), Some("0"));
            let root_line = out
                .lines()
                .skip(1)
                .find(|l| l.split_whitespace().next() == Some("0"))
                .expect("0 is mapped");
            let host: u32 = root_line.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert_ne!(host, 0, "in-sandbox root is host root");
            assert_ne!(host, rt.uid(), "in-sandbox root is the invoker");
        } else {
            run.assert_code(69);
            assert!(run.stderr.contains("subuid") || run.stderr.contains("uidmap"), "{}", run.stderr);
        }
    }
}

both! {
    /// I9: loopback only, and it is the sandbox's own (up, no route anywhere else).
    fn network_is_loopback_only(rt) {
        let run = rt.sh(&[], "ls /sys/class/net; cat /proc/net/route | wc -l");
        let out = ok(&run);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("lo"));
        assert_eq!(lines.next(), Some("1"), "routes exist: {out}");
    }
}

both! {
    /// C3/I3: a configured read-only mount is readable at its host path and cannot be written
    /// (not even by in-sandbox root); a read-write one is writable and the file lands on the host.
    fn configured_mounts_honour_read_only(rt) {
        let ro = rt.env.dir("refs");
        let rw = rt.env.dir("scratch");
        rt.env.write(&ro.join("doc.txt"), "reference");
        rt.env.write_user_config(&format!(
            "[[mount]]\nname = \"refs\"\npath = \"{}\"\nread_only = true\n\n\
             [[mount]]\nname = \"scratch\"\npath = \"{}\"\nread_only = false\n",
            ro.display(),
            rw.display()
        ));
        rt.hand_over(rt.env.root());
        let script = format!(
            "cat {ro}/doc.txt; echo; echo x > {ro}/new && echo ro-written; \
             echo y > {rw}/new && echo rw-written",
            ro = ro.display(),
            rw = rw.display()
        );
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, &script);
            let out = ok(&run);
            assert!(out.starts_with("reference"), "{run:?}");
            assert!(!out.contains("ro-written"), "read-only mount written with {opts:?}");
            assert!(!ro.join("new").exists());
        }
        let run = rt.sh(&[], &script);
        assert!(ok(&run).contains("rw-written"), "{run:?}");
        assert_eq!(std::fs::read_to_string(rw.join("new")).unwrap(), "y\n");
    }
}

both! {
    /// P1, I2: the host image carries dpkg's and apt's state as overlays of the host's, with
    /// nothing else of `/var`; changes stay in the sandbox and debconf's password store is an
    /// empty file of the sandbox's own.
    fn package_state_is_the_hosts_as_an_overlay_and_only_that(rt) {
        if !std::path::Path::new("/var/lib/dpkg/status").is_file() {
            eprintln!("skipping: this host has no dpkg database");
            return;
        }
        let run = rt.sh(
            rt.most_privileged(),
            "(ls -A /var/lib; ls -A /var/cache; ls -A /var/log) | tr '\\n' ' '; echo; \
             dpkg-query -W -f='${Package}\\n' coreutils; \
             wc -c < /var/cache/debconf/passwords.dat 2>/dev/null || echo absent; \
             touch /var/lib/dpkg/airlock-probe 2>/dev/null && echo wrote || echo read-only",
        );
        let out = ok(&run);
        let lines: Vec<&str> = out.lines().collect();
        let listed: Vec<&str> = lines[0].split_whitespace().collect();
        for entry in &listed {
            assert!(
                ["dpkg", "apt", "debconf", "airlock"].contains(entry),
                "unexpected /var entry {entry:?}: {out}"
            );
        }
        assert!(listed.contains(&"dpkg"), "{out}");
        assert_eq!(lines[1], "coreutils", "dpkg's database is not readable: {out}");
        if std::path::Path::new("/var/cache/debconf").is_dir() {
            assert_eq!(lines[2].trim(), "0", "passwords.dat is not masked: {out}");
        }
        assert!(
            !std::path::Path::new("/var/lib/dpkg/airlock-probe").exists(),
            "a write to /var/lib/dpkg inside reached the host"
        );
        if rt.is_root() {
            assert_eq!(lines[3], "wrote", "root invokers' package state is writable: {out}");
        }
    }
}

both! {
    /// I2, P1: the host image's overlays are exactly one per host directory it exposes (each
    /// allowlisted top-level directory and each package-state directory the host has as a real
    /// directory), each at that directory's own path, writable, `nosuid,nodev`. An overlay whose
    /// lower layer held more than one of them would have to be a common parent (`/`, `/var`),
    /// hiding the rest of it by a denylist: this pins the mount table against that.
    fn overlays_are_one_per_exposed_host_directory_and_nothing_else(rt) {
        let run = rt.sh(
            &[],
            "awk '{for (i = 7; i <= NF; i++) if ($i == \"-\") { print $5, $6, $(i + 1); break }}' \
             /proc/self/mountinfo",
        );
        let out = ok(&run);
        let mut overlays: Vec<(&str, &str)> = out
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (at, opts, fstype) = (f.next()?, f.next()?, f.next()?);
                (fstype == "overlay").then_some((at, opts))
            })
            .collect();
        overlays.sort_unstable();
        let host_dirs = [
            "usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
            "var/lib/dpkg", "var/lib/apt", "var/cache/apt", "var/cache/debconf", "var/log/apt",
        ];
        let mut expected: Vec<String> = host_dirs
            .iter()
            .filter(|d| {
                std::fs::symlink_metadata(std::path::Path::new("/").join(d))
                    .is_ok_and(|m| m.file_type().is_dir())
            })
            .map(|d| format!("/{d}"))
            .collect();
        expected.sort_unstable();
        let at: Vec<&str> = overlays.iter().map(|(at, _)| *at).collect();
        assert_eq!(at, expected, "overlay mount points differ:\n{out}");
        for (at, opts) in overlays {
            let opts: Vec<&str> = opts.split(',').collect();
            for want in ["rw", "nosuid", "nodev"] {
                assert!(opts.contains(&want), "overlay {at} lacks {want}: {opts:?}");
            }
        }
    }
}
