//! git, pip and npm inside the sandbox reach loopback servers through the proxy with no flag
//! beyond what airlock sets (issue 5 acceptance). A tool missing on the machine fails the test
//! with the package to install (`scripts/test` installs them in CI).

use std::path::Path;
use std::process::Command;

use super::*;
use crate::runtime::harness::{ok, Rt};

/// Fails unless `tool` runs from the sandbox's `PATH` (the host image shares `/usr`).
fn require(tool: &str, args: &[&str], package: &str) {
    let found = Command::new(tool)
        .args(args)
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{tool}` is needed by this test and is missing: install the Debian package {package} \
         (scripts/test does)"
    );
}

fn world(root: &Path) -> (Rt, Server) {
    let rt = Rt::invoker();
    let web = http_server(Some(root.to_path_buf()));
    rt.env.write_user_config(&user_config(
        &[format!("web.test:{}", web.port())],
        None,
        "",
    ));
    (rt, web)
}

fn sh(cmd: &str, cwd: &Path) {
    let st = Command::new("sh")
        .args(["-c", cmd])
        .current_dir(cwd)
        .status()
        .unwrap();
    assert!(st.success(), "{cmd} failed");
}

#[test]
fn git_clones_over_http_through_the_proxy() {
    require("git", &["--version"], "git");
    let files = tempfile::tempdir().unwrap();
    sh(
        "git init -q src && cd src && echo 'through the proxy' > README && git add README && \
         git -c user.name=t -c user.email=t@e commit -qm init && cd .. && \
         git clone -q --bare src repo.git && git -C repo.git update-server-info",
        files.path(),
    );
    let (rt, web) = world(files.path());
    let run = rt.sh(
        &[],
        &format!(
            "git ls-remote http://web.test:{p}/repo.git && \
             git clone -q http://web.test:{p}/repo.git /tmp/clone && cat /tmp/clone/README",
            p = web.port()
        ),
    );
    let out = ok(&run);
    assert!(out.contains("refs/heads/"), "{out}\n{}", run.stderr);
    assert!(out.contains("through the proxy"), "{out}\n{}", run.stderr);
}

/// pip refuses plain-HTTP indexes, so this one is HTTPS with a bound secret (a private index
/// with a token, the N6 case): pip trusts the interception CA through `REQUESTS_CA_BUNDLE`.
#[test]
fn pip_downloads_from_a_private_https_index_through_the_intercepting_proxy() {
    require("python3", &["-m", "pip", "--version"], "python3-pip");
    let files = tempfile::tempdir().unwrap();
    // A minimal valid wheel and a PEP 503 simple index pointing at it.
    let make_wheel = r#"
import zipfile, os
os.makedirs("files", exist_ok=True)
os.makedirs("simple/tinypkg", exist_ok=True)
name = "tinypkg-1.0-py3-none-any.whl"
with zipfile.ZipFile("files/" + name, "w") as z:
    z.writestr("tinypkg/__init__.py", "VALUE = 42\n")
    z.writestr("tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
    z.writestr("tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("tinypkg-1.0.dist-info/RECORD", "")
open("simple/tinypkg/index.html", "w").write('<a href="/files/%s">%s</a>\n' % (name, name))
"#;
    std::fs::write(files.path().join("mk.py"), make_wheel).unwrap();
    sh("python3 mk.py", files.path());
    let rt = Rt::invoker();
    let ca = TestCa::new(rt.env.root());
    let index = https_server(&ca, "secure.test", Some(files.path().to_path_buf()));
    let host = format!("secure.test:{}", index.port());
    rt.env
        .write_user_config(&user_config(std::slice::from_ref(&host), Some(&ca), ""));
    rt.run_args(
        &[
            "secret",
            "set",
            "INDEX_TOKEN",
            "--host",
            &host,
            "--header",
            "Authorization: Bearer {value}",
        ],
        Some(format!("{SECRET_VALUE}\n").as_bytes()),
    )
    .assert_code(0);
    let run = rt.sh(
        &[],
        &format!(
            "PIP_INDEX_URL=https://secure.test:{}/simple/ python3 -m pip download -q \
             --disable-pip-version-check --no-deps -d /tmp/dl tinypkg && ls /tmp/dl",
            index.port()
        ),
    );
    let out = ok(&run);
    assert!(
        out.contains("tinypkg-1.0-py3-none-any.whl"),
        "{out}\n{}",
        run.stderr
    );
    let seen = index.seen.all().to_ascii_lowercase();
    assert!(seen.contains(&format!(
        "authorization: bearer {}",
        SECRET_VALUE.to_ascii_lowercase()
    )));
}

#[test]
fn npm_reads_a_loopback_registry_through_the_proxy() {
    require("npm", &["--version"], "npm");
    let files = tempfile::tempdir().unwrap();
    let (rt, web) = world(files.path());
    let packument = format!(
        r#"{{"name":"tinypkg","dist-tags":{{"latest":"1.2.3"}},"versions":{{"1.2.3":{{"name":"tinypkg","version":"1.2.3","dist":{{"tarball":"http://web.test:{}/tinypkg-1.2.3.tgz"}}}}}}}}"#,
        web.port()
    );
    std::fs::write(files.path().join("tinypkg"), packument).unwrap();
    let run = rt.sh(
        &[],
        &format!(
            "npm view tinypkg version --registry http://web.test:{}/",
            web.port()
        ),
    );
    let out = ok(&run);
    assert_eq!(out.trim(), "1.2.3", "{}", run.stderr);
}
