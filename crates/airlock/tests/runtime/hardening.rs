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
