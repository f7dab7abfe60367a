//! Imported images (PRODUCT I2): a sandbox from an image holding one static binary — no shell,
//! no libc — and the host-side attacks a hostile image could try. The images are built here
//! from a tiny C program compiled with `cc -static`; nothing is downloaded.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::harness::{ok, Rt};

/// `tiny`: `tiny cat FILE` prints FILE; `tiny uid` prints the uid; `tiny owner FILE` prints
/// FILE's owner; `tiny write FILE` creates FILE holding `written`; `tiny hold DIR` creates
/// DIR/started, then waits (at most 60 s) for DIR/release; otherwise it prints its
/// arguments one per line and exits 3 (so the status is visibly the guest command's).
const TINY_C: &str = r#"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "cat") == 0) {
        FILE *f = fopen(argv[2], "r");
        if (!f) { perror(argv[2]); return 1; }
        int c;
        while ((c = fgetc(f)) != EOF) putchar(c);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        FILE *f = fopen(argv[2], "w");
        if (!f) { perror(argv[2]); return 1; }
        fputs("written\n", f);
        return fclose(f) == 0 ? 0 : 1;
    }
    if (argc == 2 && strcmp(argv[1], "uid") == 0) { printf("%d\n", (int)getuid()); return 0; }
    if (argc == 3 && strcmp(argv[1], "hold") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/started", argv[2]);
        FILE *f = fopen(path, "w");
        if (!f) { perror(path); return 1; }
        fclose(f);
        snprintf(path, sizeof path, "%s/release", argv[2]);
        for (int i = 0; i < 1200 && access(path, F_OK) != 0; i++) usleep(50000);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "owner") == 0) {
        struct stat st;
        if (stat(argv[2], &st) != 0) { perror(argv[2]); return 1; }
        printf("%d\n", (int)st.st_uid);
        return 0;
    }
    for (int i = 1; i < argc; i++) printf("%s\n", argv[i]);
    return 3;
}
"#;

/// Compiles [`TINY_C`] statically into `dir/bin/tiny`; `None` (after saying why) when no
/// static C toolchain exists and CI is not set.
pub(crate) fn tiny_tree(rt: &Rt, dir: &Path) -> Option<PathBuf> {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let src = dir.with_extension("c");
    std::fs::write(&src, TINY_C).unwrap();
    let out = Command::new("cc")
        .args(["-static", "-O", "-o"])
        .arg(dir.join("bin/tiny"))
        .arg(&src)
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        other => {
            airlock_testkit::skip(format_args!(
                "needs a static C toolchain, `cc -static` failed (scripts/test installs gcc \
                 and libc6-dev): {other:?}"
            ));
            return None;
        }
    }
    std::fs::remove_file(&src).unwrap();
    rt.hand_over(dir);
    Some(dir.to_path_buf())
}

/// `tar -C tree -cf <tree>.tar .`, every entry owned by root in the archive (as in a real
/// image), handed to the test user.
pub(crate) fn pack(rt: &Rt, tree: &Path) -> PathBuf {
    let tar = tree.with_extension("tar");
    let st = Command::new("tar")
        .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
        .arg(tree)
        .args(["-cf"])
        .arg(&tar)
        .arg(".")
        .status()
        .expect("run tar");
    assert!(st.success());
    rt.hand_over(&tar);
    tar
}

pub(crate) fn import(rt: &Rt, tar: &Path, name: &str) {
    let run = rt.run_args(
        &["image", "import", tar.to_str().unwrap(), "--name", name],
        None,
    );
    ok(&run);
}

pub(crate) fn use_image(rt: &Rt, name: &str) {
    rt.env
        .write_project_config(&rt.project, &format!("image = \"{name}\"\n"));
    rt.hand_over(&rt.project);
}

both! {
    /// I2 / issue 12: `airlock run` works in an image whose only file is one static binary
    /// (no shell, no libc): the guest is airlock itself, started before pivot_root.
    fn run_works_in_a_single_binary_image(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        import(&rt, &pack(&rt, &tree), "tiny");
        use_image(&rt, "tiny");
        let run = rt.run_args(&["run", "--", "/bin/tiny", "hello", "image"], None);
        run.assert_code(3);
        assert_eq!(run.stdout, "hello\nimage\n", "{run:?}");
        // Nothing else of the host is there: no shell to run.
        let run = rt.run_args(&["run", "--", "/bin/sh", "-c", "true"], None);
        assert_ne!(run.code, Some(0), "{run:?}");
    }
}

both! {
    /// Files owned by root in the archive keep their in-sandbox owner: root for an unprivileged
    /// user with subordinate ids (extracted in a user namespace mapped like the sandbox's), and
    /// for a root invoker the owner the host image's root-owned system files have inside.
    fn archive_root_keeps_its_owner_inside_the_sandbox(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        import(&rt, &pack(&rt, &tree), "tiny");
        let expected = if rt.is_root() {
            let host = rt.sh(&[], "stat -c %u /usr/bin/env");
            ok(&host).trim().to_owned()
        } else if rt.root_available() {
            "0".to_owned()
        } else {
            // Without subordinate ids the owners are dropped: the user's own files.
            ok(&rt.sh(&[], "id -u")).trim().to_owned()
        };
        use_image(&rt, "tiny");
        let run = rt.run_args(&["run", "--", "/bin/tiny", "owner", "/bin/tiny"], None);
        assert_eq!(ok(&run).trim(), expected, "{run:?}");
    }
}

both! {
    /// `image rm` is refused while a sandbox uses the image, and works after `down`.
    fn image_rm_is_refused_while_a_sandbox_uses_it(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        import(&rt, &pack(&rt, &tree), "tiny");
        use_image(&rt, "tiny");
        ok(&rt.run_args(&["up", "--no-attach"], None));
        let exec = rt.run_args(&["exec", "--", "/bin/tiny", "uid"], None);
        let rm = rt.run_args(&["image", "rm", "tiny"], None);
        let down = rt.run_args(&["down"], None);
        ok(&exec);
        rm.assert_code(1);
        assert!(rm.stderr.contains("image.in_use"), "{rm:?}");
        ok(&down);
        ok(&rt.run_args(&["image", "rm", "tiny"], None));
        let ls = rt.run_args(&["image", "ls", "--json"], None);
        assert_eq!(ls.json()["images"], serde_json::json!([]), "{ls:?}");
    }
}

both! {
    /// Issue 12: `image rm` is refused while an `airlock run` sandbox (which has no lifecycle
    /// record) uses the image, and works once the run ended.
    fn image_rm_is_refused_while_a_run_uses_it(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        import(&rt, &pack(&rt, &tree), "tiny");
        use_image(&rt, "tiny");
        let project = rt.project.to_str().unwrap().to_owned();
        let mut run = rt
            .command(&rt.project, &["run", "--", "/bin/tiny", "hold", &project])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn airlock run");
        let started = crate::common::wait_until(std::time::Duration::from_secs(60), || {
            rt.project.join("started").exists()
        });
        let rm = rt.run_args(&["image", "rm", "tiny"], None);
        std::fs::write(rt.project.join("release"), "").unwrap();
        let status = run.wait().unwrap();
        assert!(started, "the run never started");
        assert!(status.success(), "{status:?}");
        rm.assert_code(1);
        assert!(rm.stderr.contains("image.in_use"), "{rm:?}");
        ok(&rt.run_args(&["image", "rm", "tiny"], None));
    }
}

both! {
    /// Issue 12: `up` of an image without a shell still comes up. The home files (git's
    /// configuration and its credential helper) are written without running anything inside
    /// (no `/bin/sh` per file), and the default session, which has no shell to run, is left
    /// out with a note saying why and what to do, instead of failing `up` (with `--no-attach`
    /// and on a terminal).
    fn up_of_an_image_without_a_shell_writes_home_files_and_skips_the_session(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        import(&rt, &pack(&rt, &tree), "noshell");
        use_image(&rt, "noshell");
        let up = rt.run_args(&["up", "--no-attach"], None);
        let gitconfig = rt.env.home.join(".gitconfig");
        let cat = rt.run_args(&["exec", "--", "/bin/tiny", "cat", gitconfig.to_str().unwrap()], None);
        let helper = rt.env.home.join(".config/airlock/git-credential-placeholder");
        let mode = rt.run_args(&["exec", "--", "/bin/tiny", "owner", helper.to_str().unwrap()], None);
        // On a terminal `up` would attach to the session: it says why it cannot, and succeeds.
        let attached = rt.on_a_terminal(&["up"]);
        let down = rt.run_args(&["down"], None);
        ok(&up);
        assert!(!up.stderr.contains("cannot write"), "{up:?}");
        assert!(up.stderr.contains("no default session"), "{up:?}");
        assert!(up.stderr.contains("airlock exec"), "{up:?}");
        assert!(ok(&cat).contains("[safe]"), "{cat:?}");
        ok(&mode);
        let text = String::from_utf8_lossy(&attached.stdout);
        assert!(attached.status.success(), "{attached:?}");
        assert!(text.contains("no default session"), "{text}");
        ok(&down);
    }
}

both! {
    /// A hostile image with `home` pointing at a host directory: before pivot_root the link
    /// would resolve on the host, and creating the sandbox home would create a host directory.
    /// The start is refused and the host directory stays untouched.
    fn an_image_link_on_a_mount_path_never_reaches_the_host(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        let victim = rt.env.dir("victim");
        rt.hand_over(&victim);
        std::os::unix::fs::symlink(&victim, tree.join("home")).unwrap();
        rt.hand_over(&tree);
        import(&rt, &pack(&rt, &tree), "evil");
        use_image(&rt, "evil");
        let run = rt.run_args(&["run", "--", "/bin/tiny", "x"], None);
        run.assert_code(1);
        assert!(run.stderr.contains("image.unusable"), "{run:?}");
        assert!(run.stderr.contains("symbolic link at /home"), "{run:?}");
        let left: Vec<_> = std::fs::read_dir(&victim).unwrap().collect();
        assert!(left.is_empty(), "the host directory was written: {left:?}");
    }
}

both! {
    /// A hostile image whose system CA bundle is a link to a host file: the host side builds
    /// the sandbox's trust bundle from the image's, and must read it inside the image, never
    /// through a link to the host (which would copy a host secret into the sandbox).
    fn the_trust_bundle_never_reads_a_host_file_through_an_image_link(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        let secret = rt.env.dir("secrets").join("token");
        std::fs::write(&secret, "HOST-SECRET-TOKEN\n").unwrap();
        rt.hand_over(&secret);
        std::fs::create_dir_all(tree.join("etc/ssl/certs")).unwrap();
        std::os::unix::fs::symlink(&secret, tree.join("etc/ssl/certs/ca-certificates.crt"))
            .unwrap();
        rt.hand_over(&tree);
        import(&rt, &pack(&rt, &tree), "leaky");
        use_image(&rt, "leaky");
        let run = rt.run_args(&["run", "--", "/bin/tiny", "cat", "/run/airlock/ca-bundle.crt"], None);
        let out = ok(&run);
        assert!(out.contains("BEGIN CERTIFICATE"), "{run:?}");
        assert!(!out.contains("HOST-SECRET-TOKEN"), "a host file reached the sandbox: {run:?}");
    }
}

both! {
    /// Issue 12: the generated `/etc/passwd` and `/etc/group` keep the image's own accounts
    /// (apt looks up `_apt`) beside root, the sandbox user and nobody. The image's files are
    /// hostile input: an entry claiming uid 0, the sandbox user's name or a malformed line is
    /// left out, and a password hash never reaches the generated file.
    fn the_images_own_users_and_groups_stay_beside_the_sandbox_user(rt) {
        let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else { return };
        std::fs::create_dir_all(tree.join("etc")).unwrap();
        std::fs::write(
            tree.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\n\
             _apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n\
             toor:$6$hash:0:0:second root:/root:/bin/sh\n\
             broken:x:notanumber:1::/:/bin/sh\n\
             short:x:7\n\
             daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(
            tree.join("etc/group"),
            "root:x:0:\nadm:x:4:_apt,bad name\nnogroup:x:65534:\nstaff:x:50:\n",
        )
        .unwrap();
        rt.hand_over(&tree);
        import(&rt, &pack(&rt, &tree), "accounts");
        use_image(&rt, "accounts");
        let run = rt.run_args(&["run", "--", "/bin/tiny", "cat", "/etc/passwd"], None);
        let passwd = ok(&run);
        assert!(
            passwd.contains("_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n"),
            "{passwd}"
        );
        assert!(passwd.contains("daemon:x:1:1:"), "{passwd}");
        assert!(passwd.starts_with("root:x:0:0:"), "{passwd}");
        for gone in ["toor", "$6$hash", "broken", "short"] {
            assert!(!passwd.contains(gone), "{gone} reached the sandbox: {passwd}");
        }
        assert_eq!(passwd.matches(":x:0:").count(), 1, "{passwd}");
        let run = rt.run_args(&["run", "--", "/bin/tiny", "cat", "/etc/group"], None);
        let group = ok(&run);
        assert!(group.contains("adm:x:4:_apt\n"), "{group}");
        assert!(group.contains("staff:x:50:\n"), "{group}");
        assert_eq!(group.matches("nogroup").count(), 1, "{group}");
        assert_eq!(group.matches(":x:0:").count(), 1, "{group}");
    }
}
