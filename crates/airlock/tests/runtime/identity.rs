//! Identities on the host (PRODUCT I2, I5; issue 9 finding 5): no sandbox process is host
//! root, and the image shows only what the host makes world-readable.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::harness::{ok, Rt};

/// Root-only host files under two directories of the image (removed on drop): a 0600 file in
/// each, and a 0700 directory holding a world-readable file.
struct HostSecrets {
    paths: Vec<PathBuf>,
    files: Vec<PathBuf>,
}

const SECRET: &str = "host-secret-7f3a9c";

impl HostSecrets {
    /// Under `/etc` and `/opt`, where hosts keep secrets.
    fn create() -> Option<HostSecrets> {
        HostSecrets::create_in("/etc", "/opt")
    }

    /// A 0600 file directly in `file_top`; in `dir_top` a directory with a 0600 file and a
    /// 0700 directory. `None` (with the reason printed) when the suite cannot write there;
    /// under CI that is a failure.
    fn create_in(file_top: &str, dir_top: &str) -> Option<HostSecrets> {
        if !airlock_testkit::needs_root(&format!(
            "placing root-only files under {file_top} and {dir_top}"
        )) {
            return None;
        }
        let tag = format!("airlock-idmap-test-{}", std::process::id());
        let etc_file = Path::new(file_top).join(format!("{tag}.conf"));
        let opt_dir = Path::new(dir_top).join(&tag);
        let opt_file = opt_dir.join("key.pem");
        let private = opt_dir.join("private");
        let inner = private.join("readable-inside");
        let secrets = HostSecrets {
            paths: vec![etc_file.clone(), opt_dir.clone()],
            files: vec![etc_file.clone(), opt_file.clone(), inner.clone()],
        };
        std::fs::create_dir_all(&private).unwrap();
        std::fs::set_permissions(&opt_dir, PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&private, PermissionsExt::from_mode(0o700)).unwrap();
        for (file, mode) in [(&etc_file, 0o600), (&opt_file, 0o600), (&inner, 0o644)] {
            std::fs::write(file, SECRET).unwrap();
            std::fs::set_permissions(file, PermissionsExt::from_mode(mode)).unwrap();
        }
        Some(secrets)
    }

    /// A script that prints every secret file it can read.
    fn reader(&self) -> String {
        let mut script = String::new();
        for f in &self.files {
            script.push_str(&format!("cat '{}' 2>/dev/null; ", f.display()));
        }
        script.push_str("echo done");
        script
    }
}

impl Drop for HostSecrets {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

both! {
    /// I2 / 9.5a: a file or directory under /etc or /opt that others may not read stays
    /// unreadable for the sandbox user and for `--root`, whoever invokes airlock (a root
    /// invoker's sandbox user was host root; its in-sandbox root owns the system files).
    fn host_files_others_may_not_read_stay_unreadable_inside(rt) {
        let Some(secrets) = HostSecrets::create() else { return };
        let mut who: Vec<&[&str]> = vec![&[]];
        if rt.root_available() {
            who.push(&["--root"]);
        }
        for opts in who {
            let run = rt.sh(opts, &secrets.reader());
            let out = ok(&run);
            assert!(out.ends_with("done\n"), "{run:?}");
            assert!(!out.contains(SECRET), "{opts:?} read a root-only host file: {out}");
            // What covers them is read-only, for `--root` too (a root invoker's masks are
            // binds of one read-only template each: nothing written to one shows in another).
            let private = secrets.paths[1].join("private");
            let script = format!(
                "echo x > '{}' 2>/dev/null && echo wrote-file; \
                 touch '{}/new' 2>/dev/null && echo wrote-dir; echo done",
                secrets.files[0].display(),
                private.display()
            );
            let run = rt.sh(opts, &script);
            assert_eq!(ok(&run), "done\n", "{opts:?} wrote to a mask: {run:?}");
        }
        // The files are still there for the host (nothing was changed on the host side).
        assert_eq!(std::fs::read_to_string(&secrets.files[0]).unwrap(), SECRET);
    }
}

both! {
    /// I2 / 9.5a: the same under `/usr` and `/lib*`, the directories too large to walk at every
    /// start: a root invoker's `--root` owns the id-mapped system files, so only masking keeps
    /// it from reading a file or directory others may not read there.
    fn root_cannot_read_host_files_under_usr_that_others_may_not_read(rt) {
        let lib = if Path::new("/usr/lib").is_dir() { "/usr/lib" } else { "/usr" };
        std::fs::create_dir_all("/usr/local/share").ok();
        let Some(secrets) = HostSecrets::create_in(lib, "/usr/local/share") else { return };
        let mut who: Vec<&[&str]> = vec![&[]];
        if rt.root_available() {
            who.push(&["--root"]);
        }
        for opts in who {
            let run = rt.sh(opts, &secrets.reader());
            let out = ok(&run);
            assert!(out.ends_with("done\n"), "{run:?}");
            assert!(!out.contains(SECRET), "{opts:?} read a root-only host file under /usr: {out}");
        }
        assert_eq!(std::fs::read_to_string(&secrets.files[0]).unwrap(), SECRET);
    }
}

/// A root invoker's sandbox user: uid and gid 1000 inside (`idmap::ROOT_INVOKER_SANDBOX_ID`).
const ROOT_INVOKER_SANDBOX_ID: u32 = 1000;

/// I2 / 9.5a: a root invoker's sandbox user is uid and gid 1000 inside, and the image's
/// id-mapped mounts show host ids as themselves: a host file of host user 1000 (or of its
/// group) that others may not read, and a directory of that user others may not enter, stay
/// closed to the sandbox user of a plain `run` (whose image is not masked: no process of it
/// holds in-sandbox root) and to `--root` (masked). What others may read stays readable.
#[test]
fn a_root_invokers_sandbox_user_reads_no_host_file_of_its_own_id_that_others_may_not_read() {
    if !airlock_testkit::needs_root("placing files of host uid 1000 under /etc and /opt") {
        return;
    }
    let rt = Rt::invoker();
    let id = ROOT_INVOKER_SANDBOX_ID;
    let tag = format!("airlock-idmap-user-test-{}", std::process::id());
    let etc_dir = Path::new("/etc").join(&tag);
    let opt_dir = Path::new("/opt").join(&tag);
    let secrets = HostSecrets {
        paths: vec![etc_dir.clone(), opt_dir.clone()],
        files: vec![
            etc_dir.join("own.conf"),
            etc_dir.join("group.conf"),
            opt_dir.join("private/inside"),
        ],
    };
    let public = etc_dir.join("public.conf");
    std::fs::create_dir_all(opt_dir.join("private")).unwrap();
    std::fs::create_dir_all(&etc_dir).unwrap();
    let files = [
        (&secrets.files[0], 0o600, (id, id)),
        (&secrets.files[1], 0o640, (0, id)),
        (&secrets.files[2], 0o644, (id, id)),
        (&public, 0o644, (id, id)),
    ];
    for (file, mode, (uid, gid)) in files {
        std::fs::write(file, SECRET).unwrap();
        std::fs::set_permissions(file, PermissionsExt::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(file, Some(uid), Some(gid)).unwrap();
    }
    for dir in [&etc_dir, &opt_dir] {
        std::fs::set_permissions(dir, PermissionsExt::from_mode(0o755)).unwrap();
    }
    let private = opt_dir.join("private");
    std::fs::set_permissions(&private, PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&private, Some(id), Some(id)).unwrap();
    let script = format!("{}; cat '{}'", secrets.reader(), public.display());
    for opts in [&[][..], &["--root"][..]] {
        let run = rt.sh(opts, &script);
        let out = ok(&run);
        assert_eq!(
            out,
            format!("done\n{SECRET}"),
            "{opts:?} read a file of host user {id} that others may not read: {run:?}"
        );
    }
}

/// Host uids (real, effective, saved, filesystem) of every process in the pid namespace of the
/// process running `sleep <marker>`.
fn uids_in_pid_namespace_of(marker: &str) -> Option<Vec<(u32, Vec<u32>)>> {
    let procs: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    // Exactly `sleep <marker>`: airlock's own command line on the host mentions it too.
    let is_marker = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| c == format!("sleep\0{marker}\0").as_bytes())
            .unwrap_or(false)
    };
    let witness = procs.iter().copied().find(is_marker)?;
    let target = ns(witness)?;
    let found = procs
        .into_iter()
        .filter(|&pid| ns(pid).as_ref() == Some(&target))
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            let ids = line
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            Some((pid, ids))
        })
        .collect();
    Some(found)
}

both! {
    /// I5 / 9.5b: seen from the host, no process of the sandbox's pid namespace has host uid 0
    /// in any of its ids — as the sandbox user and as `--root`, also when root invokes airlock.
    fn no_sandbox_process_runs_as_host_root(rt) {
        // The scan reads PID 1's namespace links, which a non-dumpable process shows to root
        // only; the root pass runs both variants (airlock itself as the test user in one).
        if !airlock_testkit::needs_root("reading the sandbox's PID 1 (non-dumpable) from the host") {
            return;
        }
        let mut who: Vec<&[&str]> = vec![&[]];
        if rt.root_available() {
            who.push(&["--root"]);
        }
        for (i, opts) in who.into_iter().enumerate() {
            let marker = format!("987.{}{}", std::process::id(), i);
            let mut args = vec!["run"];
            args.extend_from_slice(opts);
            let script = format!("sleep {marker} & echo up; wait");
            args.extend_from_slice(&["--", "sh", "-c", &script]);
            let mut child = rt
                .command(&rt.project, &args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let mut line = String::new();
            use std::io::BufRead;
            std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            assert_eq!(line, "up\n");
            // `up` may come before the background `sleep` has exec'd: wait for it (bounded).
            let mut procs = Vec::new();
            for _ in 0..200 {
                if let Some(found) = uids_in_pid_namespace_of(&marker) {
                    procs = found;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            let _ = child.kill();
            let _ = child.wait();
            // PID 1, the shell and sleep at least: the witness proves the scan saw the sandbox.
            assert!(procs.len() >= 3, "{opts:?}: {procs:?}");
            for (pid, ids) in &procs {
                assert_eq!(ids.len(), 4, "{pid}: {ids:?}");
                assert!(ids.iter().all(|&id| id != 0), "{opts:?}: pid {pid} is host root: {ids:?}");
            }
        }
    }
}

both! {
    /// I2 / I5: with host root unmapped, a root invoker's in-sandbox root still owns the
    /// system files (id-mapped lower layers) and can change them in the overlay, while the
    /// sandbox user cannot; nothing reaches the host.
    fn in_sandbox_root_changes_system_files_only_inside(rt) {
        let name = format!("airlock-written-{}", std::process::id());
        let run = rt.sh(&[], &format!("echo x > /etc/{name} 2>/dev/null && echo wrote; echo done"));
        let out = ok(&run);
        assert_eq!(out, "done\n", "the sandbox user wrote to /etc: {out}");
        // Unprivileged invokers' system files are nobody's and read-only inside (I2).
        if rt.is_root() {
            let script = format!("echo x > /etc/{name} && cat /etc/{name} && stat -c %U /usr/bin");
            let run = rt.sh(&["--root"], &script);
            assert_eq!(ok(&run), "x\nroot\n", "{run:?}");
        }
        assert!(!Path::new("/etc").join(&name).exists(), "a sandbox write reached the host's /etc");
    }
}

both! {
    /// I5 / 9.5b: files the sandbox user creates in the workspace belong to the invoker on the
    /// host, and in-sandbox root's never belong to host root unless host root is the invoker
    /// (a root invoker's workspace is an id-mapped mount, and `--root` gets the root view).
    fn workspace_writes_never_belong_to_host_root(rt) {
        let run = rt.sh(&[], "echo a > by-user");
        ok(&run);
        let meta = std::fs::metadata(rt.project.join("by-user")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (rt.uid(), host_gid(&rt)), "{run:?}");
        if rt.root_available() {
            let run = rt.sh(&["--root"], "echo b > by-root");
            ok(&run);
            let meta = std::fs::metadata(rt.project.join("by-root")).unwrap();
            // A root invoker's --root writes as the invoker (the root view); an unprivileged
            // invoker's as its first subordinate id, never as host root.
            if rt.is_root() {
                assert_eq!((meta.uid(), meta.gid()), (0, host_gid(&rt)), "{run:?}");
            } else {
                assert_ne!(meta.uid(), 0, "in-sandbox root wrote a host-root file");
            }
        }
    }
}

/// 9.5: what a root invoker's `--root` writes into a workspace belongs to the invoker on the
/// host, through `run --root` and through `exec --root` into an `up` sandbox (the root view),
/// while the protected paths stay read-only and rename-proof for it and what it creates in the
/// image stays root's inside. (An unprivileged invoker's `--root` writes as its first
/// subordinate id: its filesystems cannot be id-mapped; docs/security.md, limitations.)
#[test]
fn root_writes_in_a_workspace_belong_to_the_invoker() {
    let rt = Rt::invoker();
    if !airlock_testkit::needs_root("a root invoker's sandbox (id-mapped workspaces)") {
        return;
    }
    let git = rt.project.join(".git");
    std::fs::create_dir_all(&git).unwrap();
    std::fs::write(git.join("config"), "[core]\n").unwrap();
    let owner = |name: &str| {
        let meta = std::fs::symlink_metadata(rt.project.join(name)).unwrap();
        (meta.uid(), meta.gid())
    };
    let invoker = (rt.uid(), host_gid(&rt));
    let script = "touch by-root && mkdir dir-by-root && echo x > dir-by-root/f && \
        echo x > /usr/local/airlock-root-made && stat -c %u:%g /usr/local/airlock-root-made; \
        echo evil > .git/config 2>/dev/null && echo wrote-config; \
        mv .git .git-old 2>/dev/null && echo moved-git; \
        mkdir -p .airlock && echo x > .airlock/new 2>/dev/null && echo wrote-airlock; echo done";
    let run = rt.sh(&["--root"], script);
    assert_eq!(ok(&run), "0:0\ndone\n", "{run:?}");
    for name in ["by-root", "dir-by-root", "dir-by-root/f"] {
        assert_eq!(
            owner(name),
            invoker,
            "{name}: --root's write does not belong to the invoker"
        );
    }
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n"
    );
    assert!(!rt.project.join(".git-old").exists());
    assert!(
        !Path::new("/usr/local/airlock-root-made").exists(),
        "an image write reached the host"
    );

    ok(&rt.run_args(&["up", "--no-attach"], None));
    let target = rt.project.join("by-exec-root");
    let target = target.to_str().unwrap();
    let exec = rt.run_args(&["exec", "--root", "--", "touch", target], None);
    let protected = rt.run_args(
        &[
            "exec",
            "--root",
            "--",
            "sh",
            "-c",
            &format!("echo evil > {}/.git/config", rt.project.display()),
        ],
        None,
    );
    ok(&rt.run_args(&["down"], None));
    ok(&exec);
    assert_ne!(
        protected.code,
        Some(0),
        "exec --root wrote .git/config: {protected:?}"
    );
    assert_eq!(
        owner("by-exec-root"),
        invoker,
        "exec --root's write does not belong to the invoker"
    );
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n"
    );
}

fn host_gid(rt: &Rt) -> u32 {
    std::fs::metadata(&rt.project).unwrap().gid()
}

/// Unmounts (detached) the bind mount at its path when the test ends, however it ends.
struct BindGuard(std::path::PathBuf);

impl Drop for BindGuard {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// I5 / 9.5b: a root invoker's sandbox refuses a mount whose filesystem cannot be id-mapped
/// (sysfs here, bound outside `/sys`, which a mount may not name; NFS and FUSE elsewhere)
/// with the reason, instead of showing it as host root's files. Unprivileged invokers bind it
/// under their own ids, as before.
#[test]
fn root_invoker_refuses_a_filesystem_that_cannot_be_id_mapped() {
    let rt = Rt::invoker();
    if !airlock_testkit::needs_root("the invoker must be root") {
        return;
    }
    let target = rt.env.dir("sysfs-mm");
    nix::mount::mount(
        Some("/sys/kernel/mm"),
        &target,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .expect("bind /sys/kernel/mm for the test");
    let _bound = BindGuard(target.clone());
    rt.env.write_user_config(&format!(
        "[[mount]]\nname = \"mm\"\npath = \"{}\"\nread_only = true\n",
        target.display()
    ));
    let run = rt.sh(&[], "echo started");
    run.assert_code(69);
    assert!(!run.stdout.contains("started"), "{run:?}");
    assert!(
        run.stderr.contains(&target.display().to_string()) && run.stderr.contains("id-mapped"),
        "{}",
        run.stderr
    );
}
