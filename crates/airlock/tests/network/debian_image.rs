//! Issue 12 / I2 / P1 acceptance: a Debian rootfs tar imported with `airlock image import` and
//! used with `up` provisions `packages` through the proxy, and the install vanishes on `down`.
//!
//! Nothing is downloaded: the rootfs is assembled here from the host's own Debian system — the
//! files dpkg lists for apt, dpkg, dash, coreutils and the other few programs dpkg and apt
//! run, and every package they depend on (documentation, manuals and translations left out), a dpkg status holding just
//! those packages, and an apt source naming the loopback repository this test serves (the same
//! one the host-image test builds with dpkg-deb).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::packages::build_repo;
use super::{http_server, user_config};
use crate::lifecycle::Project;

/// What the image needs: apt and dpkg, the programs dpkg checks for (`diff`, `ldconfig`),
/// debconf's apt hook (perl), and what airlock's `packages` step runs (sh, grep, find, stat,
/// chown, …).
const SEED: &[&str] = &[
    "apt",
    "dpkg",
    "dash",
    "coreutils",
    "grep",
    "findutils",
    "sed",
    "diffutils",
    "libc-bin",
    "perl-base",
];

/// Paths left out of the image (they are large and nothing here reads them).
const LEFT_OUT: &[&str] = &[
    "/usr/share/doc/",
    "/usr/share/man/",
    "/usr/share/locale/",
    "/usr/share/info/",
    "/usr/share/lintian/",
    "/usr/lib/x86_64-linux-gnu/gconv/",
];

/// Empty directories dpkg and apt expect.
const STATE_DIRS: &[&str] = &[
    "var/lib/dpkg/info",
    "var/lib/dpkg/updates",
    "var/lib/dpkg/triggers",
    "var/lib/apt/lists/partial",
    "var/cache/apt/archives/partial",
    "var/log/apt",
    "tmp",
    "root",
];

fn query(args: &[&str]) -> String {
    let out = Command::new("dpkg-query").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn installed(package: &str) -> bool {
    query(&["-W", "-f=${Status}", package]).contains("install ok installed")
}

/// `SEED` and, recursively, the first installed alternative of each of their `Depends` and
/// `Pre-Depends`.
fn closure() -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = SEED.iter().map(|s| (*s).to_owned()).collect();
    while let Some(p) = todo.pop() {
        if !seen.insert(p.clone()) {
            continue;
        }
        let deps = query(&["-W", "-f=${Depends}, ${Pre-Depends}", &p]);
        for clause in deps.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let first = clause.split('|').map(|alt| {
                let name = alt.trim().split([' ', '(']).next().unwrap_or("");
                name.split(':').next().unwrap_or("").to_owned()
            });
            if let Some(dep) = first.into_iter().find(|d| installed(d)) {
                todo.push(dep);
            }
        }
    }
    seen
}

/// `path` with its parent resolved on the host (`/bin/sh` becomes `/usr/bin/sh` on a
/// merged-`/usr` system), so no archive entry goes through a link.
fn canonical(path: &str) -> Option<String> {
    let p = Path::new(path);
    let parent = std::fs::canonicalize(p.parent()?).ok()?;
    let full = parent.join(p.file_name()?);
    std::fs::symlink_metadata(&full).ok()?;
    Some(full.to_string_lossy().into_owned())
}

/// Writes `dir/debian.tar`: the packages' files from the host's `/`, then the dpkg database
/// and apt configuration staged in `dir/extra`.
fn debian_rootfs(dir: &Path, source: &str) -> PathBuf {
    let packages = closure();
    let mut files = BTreeSet::new();
    for p in &packages {
        for line in query(&["-L", p]).lines() {
            if !line.starts_with('/') || LEFT_OUT.iter().any(|l| line.starts_with(l)) {
                continue;
            }
            if let Some(c) = canonical(line) {
                files.insert(c.trim_start_matches('/').to_owned());
            }
        }
    }
    for top in ["bin", "sbin", "lib", "lib64"] {
        // The merged-/usr links themselves (`bin -> usr/bin`).
        if std::fs::symlink_metadata(Path::new("/").join(top)).is_ok() {
            files.insert(top.to_owned());
        }
    }
    files.remove("");
    let extra = dir.join("extra");
    let mut args = vec!["-s"];
    args.extend(packages.iter().map(String::as_str));
    let status = query(&args);
    let staged: BTreeMap<&str, String> = [
        ("var/lib/dpkg/status", status),
        ("var/lib/dpkg/available", String::new()),
        ("etc/apt/sources.list", format!("{source}\n")),
        (
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n"
                .to_owned(),
        ),
        ("etc/group", "root:x:0:\nnogroup:x:65534:\n".to_owned()),
    ]
    .into_iter()
    .collect();
    for (rel, text) in &staged {
        let path = extra.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    for d in STATE_DIRS {
        std::fs::create_dir_all(extra.join(d)).unwrap();
    }
    // The host part, then what is staged here and not already in it (parents first).
    let mut list = String::new();
    for f in &files {
        list.push_str(f);
        list.push('\n');
    }
    list.push_str(&format!("-C {}\n", extra.display()));
    let mut staged_entries = BTreeSet::new();
    for rel in staged.keys().chain(STATE_DIRS.iter()) {
        let mut at = PathBuf::new();
        for c in Path::new(&rel).components() {
            at.push(c);
            staged_entries.insert(at.to_string_lossy().into_owned());
        }
    }
    for e in staged_entries.iter().filter(|e| !files.contains(*e)) {
        list.push_str(e);
        list.push('\n');
    }
    let list_path = dir.join("files");
    std::fs::write(&list_path, list).unwrap();
    let tar = dir.join("debian.tar");
    let out = Command::new("tar")
        .args([
            "--numeric-owner",
            "--owner=0",
            "--group=0",
            "--no-recursion",
            "-C",
            "/",
            "-cf",
        ])
        .arg(&tar)
        .arg("-T")
        .arg(&list_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tar failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let size = std::fs::metadata(&tar).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "debian rootfs: {} packages, {} host entries, {} MiB",
        packages.len(),
        files.len(),
        size / (1024 * 1024)
    );
    tar
}

#[test]
fn a_debian_rootfs_tar_imported_provisions_packages_through_the_proxy_and_vanishes_on_down() {
    if !airlock_testkit::needs_root("apt installs as the sandbox's root in an imported image") {
        return;
    }
    for tool in ["dpkg-query", "dpkg-deb", "tar"] {
        if !airlock_testkit::needs_tool(tool) {
            return;
        }
    }
    let files = tempfile::tempdir().unwrap();
    let repo = build_repo(files.path());
    let web = http_server(Some(repo));
    let p = Project::new();
    let source = format!("deb [trusted=yes] http://web.test:{}/ ./", web.port());
    let tar = debian_rootfs(files.path(), &source);
    let import = p.run(&["image", "import", tar.to_str().unwrap(), "--name", "debian"]);
    import.assert_code(0);

    p.env.write_user_config(&user_config(
        &[format!("web.test:{}", web.port())],
        None,
        "",
    ));
    p.env.write_project_config(
        &p.dir,
        "image = \"debian\"\npackages = [\"airlock-hello\"]\n",
    );
    p.env.write(
        &p.dir.join(".airlock/provision.sh"),
        "cat /usr/share/airlock-hello/hello.txt\n",
    );
    let up = p.run(&["up", "--no-attach"]);
    up.assert_code(0);
    assert!(up.stderr.contains("[packages]"), "{}", up.stderr);
    assert!(
        up.stderr.contains("[project-script] installed by apt"),
        "{}",
        up.stderr
    );
    let cat = p.run(&["exec", "--", "cat", "/usr/share/airlock-hello/hello.txt"]);
    cat.assert_code(0);
    assert_eq!(cat.stdout, "installed by apt\n");
    let status = p.run(&[
        "exec",
        "--",
        "dpkg-query",
        "-W",
        "-f=${Status}",
        "airlock-hello",
    ]);
    assert_eq!(status.stdout, "install ok installed", "{status:?}");
    // The image's own accounts are there beside the sandbox user (apt's `_apt`).
    let passwd = p.run(&["exec", "--", "cat", "/etc/passwd"]);
    assert!(passwd.stdout.contains("\n_apt:x:42:"), "{passwd:?}");
    assert!(
        web.seen.all().contains("airlock-hello_1.0_all.deb"),
        "{}",
        web.seen.all()
    );
    assert!(
        super::packages::audit_lines(&p).contains("web.test"),
        "the fetch did not go through the proxy"
    );

    p.run(&["down"]).assert_code(0);
    let image_root = p.env.data_home().join("airlock/images/debian/rootfs");
    assert!(
        image_root.join("usr/bin/apt-get").exists(),
        "{image_root:?}"
    );
    assert!(
        !image_root.join("usr/share/airlock-hello").exists(),
        "the install reached the imported image"
    );
    // A new sandbox of the image (no provisioning: `run`) has no trace of it.
    let run = p.run(&["run", "--", "dpkg-query", "-W", "airlock-hello"]);
    assert_ne!(run.code, Some(0), "{run:?}");
    p.run(&["image", "rm", "debian"]).assert_code(0);
}
