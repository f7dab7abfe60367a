//! P1, P2, I2: `packages` install with apt-get in a host-image sandbox as the sandbox's root,
//! through the proxy, from a loopback apt repository the test builds; the install vanishes on
//! `down`, and the second `up` installs from the package cache without downloading anything
//! (the upstream and the sandbox's audit log both show no request).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{http_server, user_config};
use crate::lifecycle::Project;

fn sh(cmd: &str, cwd: &Path) -> String {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A flat apt repository with one `Architecture: all` package, `airlock-hello`, built with
/// dpkg-deb; `Packages` and `Release` written by hand (apt-ftparchive is not needed).
pub(super) fn build_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("../pkg/DEBIAN")).unwrap();
    std::fs::create_dir_all(repo.join("../pkg/usr/share/airlock-hello")).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        dir.join("pkg/DEBIAN/control"),
        "Package: airlock-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Test <t@example.com>\n\
         Description: a package airlock's tests install\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("pkg/usr/share/airlock-hello/hello.txt"),
        "installed by apt\n",
    )
    .unwrap();
    sh(
        "dpkg-deb -Zgzip --root-owner-group --build pkg repo/airlock-hello_1.0_all.deb >/dev/null",
        dir,
    );
    sh(
        "cd repo && { dpkg-deb -f airlock-hello_1.0_all.deb; \
         echo Filename: ./airlock-hello_1.0_all.deb; \
         echo Size: $(stat -c %s airlock-hello_1.0_all.deb); \
         echo SHA256: $(sha256sum airlock-hello_1.0_all.deb | cut -d' ' -f1); echo; } > Packages && \
         { echo 'Date: Tue, 01 Dec 2026 00:00:00 UTC'; echo 'SHA256:'; \
           echo \" $(sha256sum Packages | cut -d' ' -f1) $(stat -c %s Packages) Packages\"; } > Release",
        dir,
    );
    repo
}

/// Entries under `dir` (not following links) whose owner is not the invoking user.
fn foreign_owned(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::getuid().as_raw();
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        if meta.uid() != me {
            out.push(e.path());
        }
        if meta.is_dir() {
            out.extend(foreign_owned(&e.path()));
        }
    }
    out
}

pub(super) fn audit_lines(p: &Project) -> String {
    let mut text = String::new();
    let dir = p.state_root().join("sandboxes");
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        text.push_str(&std::fs::read_to_string(e.path().join("audit.jsonl")).unwrap_or_default());
    }
    text
}

#[test]
fn packages_install_through_the_proxy_vanish_on_down_and_come_from_the_cache_next_time() {
    if nix::unistd::getuid().as_raw() != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "this test needs root (the host image is read-only for unprivileged invokers)"
        );
        eprintln!("skipping: needs root (the host image is read-only for unprivileged invokers)");
        return;
    }
    assert!(
        Path::new("/usr/bin/apt-get").exists() && Path::new("/usr/bin/dpkg-deb").exists(),
        "this test needs apt-get and dpkg-deb (Debian package apt and dpkg)"
    );
    let files = tempfile::tempdir().unwrap();
    let repo = build_repo(files.path());
    let web = http_server(Some(repo));
    let p = Project::new();
    // apt reads its sources from APT_CONFIG, set through `[env]`: only the test repository.
    let conf = p.dir.join("apt");
    std::fs::create_dir_all(conf.join("parts")).unwrap();
    std::fs::write(
        conf.join("sources.list"),
        format!("deb [trusted=yes] http://web.test:{}/ ./\n", web.port()),
    )
    .unwrap();
    std::fs::write(
        conf.join("apt.conf"),
        format!(
            "Dir::Etc::SourceList \"{0}/sources.list\";\nDir::Etc::SourceParts \"{0}/parts\";\n",
            conf.display()
        ),
    )
    .unwrap();
    p.env.write_user_config(&user_config(
        &[format!("web.test:{}", web.port())],
        None,
        &format!(
            "[env.vars]\nAPT_CONFIG = \"{}\"\n",
            conf.join("apt.conf").display()
        ),
    ));
    p.env
        .write_project_config(&p.dir, "packages = [\"airlock-hello\"]\n");
    // P1 order: the project's script runs after `packages` and sees the package.
    p.env.write(
        &p.dir.join(".airlock/provision.sh"),
        "cat /usr/share/airlock-hello/hello.txt\n",
    );

    let first = p.run(&["up", "--no-attach"]);
    first.assert_code(0);
    assert!(first.stderr.contains("[packages]"), "{}", first.stderr);
    assert!(
        first.stderr.contains("[project-script] installed by apt"),
        "{}",
        first.stderr
    );
    let cat = p.run(&["exec", "--", "cat", "/usr/share/airlock-hello/hello.txt"]);
    cat.assert_code(0);
    assert_eq!(cat.stdout, "installed by apt\n");
    assert!(
        !Path::new("/usr/share/airlock-hello").exists(),
        "the install reached the host"
    );
    let deb_requests = |s: &str| s.matches("airlock-hello_1.0_all.deb").count();
    assert_eq!(deb_requests(&web.seen.all()), 1, "{}", web.seen.all());
    assert!(
        audit_lines(&p).contains("web.test"),
        "the fetch did not go through the proxy"
    );

    p.run(&["down"]).assert_code(0);
    // The next sandbox's root may be another host id: everything in the cache belongs to the
    // invoker (the sandbox user), nothing to this sandbox's root.
    let foreign = foreign_owned(&p.env.cache_home().join("airlock"));
    assert!(
        foreign.is_empty(),
        "cache entries not owned by the invoker: {foreign:?}"
    );
    let requests_before = web.seen.all();
    let second = p.run(&["up", "--no-attach"]);
    second.assert_code(0);
    let cat = p.run(&["exec", "--", "cat", "/usr/share/airlock-hello/hello.txt"]);
    cat.assert_code(0);
    assert_eq!(
        web.seen.all(),
        requests_before,
        "the second up downloaded again"
    );
    assert!(
        !audit_lines(&p).contains("web.test"),
        "the second sandbox's audit log shows a request: {}",
        audit_lines(&p)
    );
}

/// P1: a retained `up` re-applies the current network policy, hand edits included, before
/// provisioning runs.
#[test]
fn retained_up_applies_a_hand_edited_network_policy() {
    let web = http_server(None);
    let p = Project::new();
    let url = format!("http://web.test:{}/", web.port());
    p.env.write_user_config(&user_config(&[], None, ""));
    p.up();
    let denied = p.run(&[
        "exec",
        "--",
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(denied.stdout, "403", "{}", denied.stderr);
    // A hand edit, not `airlock policy allow`: nothing tells the running proxy but `up`.
    p.env.write_user_config(&user_config(
        &[format!("web.test:{}", web.port())],
        None,
        "",
    ));
    p.up();
    let allowed = p.run(&["exec", "--", "curl", "-s", &url]);
    allowed.assert_code(0);
    assert_eq!(allowed.stdout, super::GREETING);
}
