//! P2, P4 acceptance: a Rust, a Python and a Node project each build inside the sandbox with
//! only airlock config — no flag, no recipe — their downloads landing in the package cache.

use std::path::Path;

use super::{http_server, user_config};
use crate::runtime::harness::{ok, Rt};

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The package cache directories of the world (one per project).
fn cache_files(rt: &Rt, sub: &str) -> usize {
    let projects = rt.env.cache_home().join("airlock/projects");
    let mut n = 0;
    for e in std::fs::read_dir(projects).into_iter().flatten().flatten() {
        n += walk(&e.path().join(sub));
    }
    n
}

fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => walk(&e.path()),
            _ => 1,
        })
        .sum()
}

/// `[[tool]] name = "rust"` maps the invoker's rustup toolchain read-only and cargo's home is
/// the cache: `cargo build` of a crate with a path dependency works as it is.
#[test]
fn rust_project_with_a_path_dependency_builds_with_only_a_tool_entry() {
    // The toolchain of the user running the suite (root here): HOME must be that user's.
    let home = Path::new("/root");
    if !airlock_testkit::needs_root("the toolchain under test is root's, in /root/.rustup") {
        return;
    }
    if !home.join(".rustup").is_dir() {
        return airlock_testkit::skip("needs rustup in /root/.rustup");
    }
    let rt = Rt::invoker();
    rt.env.write_user_config("[[tool]]\nname = \"rust\"\n");
    let p = &rt.project;
    write(
        p,
        "Cargo.toml",
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\ndep = { path = \"dep\" }\n",
    );
    write(
        p,
        "dep/Cargo.toml",
        "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        p,
        "dep/src/lib.rs",
        "pub fn hi() -> &'static str { \"built inside\" }\n",
    );
    write(
        p,
        "src/main.rs",
        "fn main() { println!(\"{}\", dep::hi()); }\n",
    );
    let mut cmd = rt.command(
        p,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "cargo build -q && ./target/debug/app && echo $CARGO_HOME",
        ],
    );
    cmd.env("HOME", home);
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout, "built inside\n/var/cache/airlock/cargo\n",
        "{stderr}"
    );
}

/// npm with its cache in the package cache: a project with a local dependency and a build
/// script installs and builds.
#[test]
fn node_project_builds_with_only_config_and_caches_in_the_package_cache() {
    let rt = Rt::invoker();
    let p = &rt.project;
    write(
        p,
        "package.json",
        r#"{"name":"app","version":"1.0.0","private":true,
            "dependencies":{"dep":"file:./dep"},
            "scripts":{"build":"node -e \"require('fs').writeFileSync('out.txt', require('dep'))\""}}"#,
    );
    write(
        p,
        "dep/package.json",
        r#"{"name":"dep","version":"1.0.0","main":"index.js"}"#,
    );
    write(p, "dep/index.js", "module.exports = 'built inside';\n");
    let run = rt.sh(
        &[],
        "npm install --no-audit --no-fund -s && npm run -s build && cat out.txt",
    );
    let out = ok(&run);
    assert!(out.ends_with("built inside"), "{out}\n{}", run.stderr);
    assert!(
        cache_files(&rt, "npm") > 0,
        "npm did not write its cache into the package cache"
    );
}

/// pip in a virtual environment installs the project's requirements from the index named in
/// `[env]`, through the proxy; its cache directory is in the package cache.
#[test]
fn python_project_installs_its_requirements_with_only_config() {
    let files = tempfile::tempdir().unwrap();
    let make = r#"
import zipfile, os
os.makedirs("files", exist_ok=True)
os.makedirs("simple/tinypkg", exist_ok=True)
name = "tinypkg-1.0-py3-none-any.whl"
with zipfile.ZipFile("files/" + name, "w") as z:
    z.writestr("tinypkg/__init__.py", "VALUE = 'built inside'\n")
    z.writestr("tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
    z.writestr("tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("tinypkg-1.0.dist-info/RECORD", "")
open("simple/tinypkg/index.html", "w").write('<a href="/files/%s">%s</a>\n' % (name, name))
"#;
    write(files.path(), "mk.py", make);
    let made = std::process::Command::new("python3")
        .arg("mk.py")
        .current_dir(files.path())
        .status()
        .unwrap();
    assert!(made.success());
    let index = http_server(Some(files.path().to_path_buf()));
    let rt = Rt::invoker();
    rt.env.write_user_config(&user_config(
        &[format!("web.test:{}", index.port())],
        None,
        &format!(
            "[env.vars]\nPIP_INDEX_URL = \"http://web.test:{}/simple/\"\n\
             PIP_TRUSTED_HOST = \"web.test\"\nPIP_DISABLE_PIP_VERSION_CHECK = \"1\"\n",
            index.port()
        ),
    ));
    write(&rt.project, "requirements.txt", "tinypkg==1.0\n");
    let run = rt.sh(
        &[],
        "python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt && \
         .venv/bin/python -c 'import tinypkg; print(tinypkg.VALUE)' && .venv/bin/pip cache dir",
    );
    let out = ok(&run);
    // The test index sends no caching headers, so pip stores nothing; where it would is what
    // airlock decides.
    assert_eq!(
        out, "built inside\n/var/cache/airlock/pip\n",
        "{}",
        run.stderr
    );
    assert!(index.seen.all().contains("tinypkg-1.0-py3-none-any.whl"));
}
