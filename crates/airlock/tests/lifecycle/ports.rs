//! `airlock ports` (issue 11): a web server inside the sandbox is reachable from the host after
//! `--publish`, not after `--unpublish` or `down`; nothing listens beyond loopback.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use super::{wait_until, Project};

/// Starts a tiny HTTP server on `port` inside the sandbox (python3 or busybox).
fn serve_in_sandbox(p: &Project, port: u16) {
    let script = format!(
        "cd /tmp && echo sandbox-page > index.html && exec python3 -m http.server {port} --bind 127.0.0.1"
    );
    p.run(&["exec", "-d", "--", "sh", "-c", &script])
        .assert_code(0);
}

fn get(port: u16) -> Option<String> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    conn.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    conn.read_to_string(&mut body).ok()?;
    Some(body)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn published(p: &Project) -> Vec<(u64, u64)> {
    let run = p.run(&["ports", "--json"]);
    run.assert_code(0);
    run.json()["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["host"].as_u64().unwrap(), f["guest"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_sandbox_web_server_is_reachable_after_publish_and_not_after_unpublish_or_down() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is needed for this test"
        );
        eprintln!("skipped: no python3 for the sandbox web server");
        return;
    }
    let p = Project::new();
    p.up();
    serve_in_sandbox(&p, 3000);
    let host = free_port();
    assert!(
        get(host).is_none(),
        "nothing should answer before publishing"
    );
    let spec = format!("{host}:3000");
    p.run(&["ports", "--publish", &spec]).assert_code(0);
    assert!(
        wait_until(Duration::from_secs(10), || get(host)
            .is_some_and(|b| b.contains("sandbox-page"))),
        "the sandbox page is not reachable on 127.0.0.1:{host}"
    );
    assert_eq!(published(&p), [(u64::from(host), 3000)]);
    assert_eq!(
        p.status()["ports"][0]["host"].as_u64(),
        Some(u64::from(host))
    );
    p.run(&["ports", "--unpublish", &host.to_string()])
        .assert_code(0);
    assert!(get(host).is_none(), "still reachable after --unpublish");
    assert!(published(&p).is_empty());
    // Published again, then the sandbox goes away: so does the port.
    p.run(&["ports", "--publish", &spec]).assert_code(0);
    assert!(wait_until(Duration::from_secs(10), || get(host).is_some()));
    p.run(&["down"]).assert_code(0);
    assert!(get(host).is_none(), "still reachable after down");
}

#[test]
fn publishing_a_host_port_in_use_is_a_clear_error() {
    let p = Project::new();
    p.up();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let run = p.run(&["ports", "--publish", &format!("{port}:80")]);
    run.assert_code(1);
    assert!(run.stderr.contains("in use"), "{}", run.stderr);
    assert!(published(&p).is_empty());
    // Bad specs are usage errors, before anything is asked of the sandbox.
    for bad in ["80", "x:80", "8080:0", "70000:80"] {
        p.run(&["ports", "--publish", bad]).assert_code(2);
    }
}

/// The socket inodes `pid` holds open.
fn socket_inodes(pid: u64) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            l.to_str()
                .and_then(|s| s.strip_prefix("socket:["))
                .and_then(|s| s.strip_suffix(']'))
                .map(str::to_owned)
        })
        .collect()
}

#[test]
fn published_ports_listen_on_loopback_only() {
    let p = Project::new();
    p.up();
    p.run(&["ports", "--publish", "0:8080", "--publish", "0:8081"])
        .assert_code(0);
    assert_eq!(published(&p).len(), 2);
    let keeper = p.status()["keeper"]["pid"].as_u64().expect("keeper pid");
    let inodes = socket_inodes(keeper);
    let mut listening = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // local_address, state 0A = LISTEN, inode
            if cols.len() > 9 && cols[3] == "0A" && inodes.iter().any(|i| i == cols[9]) {
                listening += 1;
                assert!(
                    table.ends_with("tcp") && cols[1].starts_with("0100007F:"),
                    "the keeper listens on {} ({table})",
                    cols[1]
                );
            }
        }
    }
    assert_eq!(
        listening, 2,
        "both published ports are the keeper's listeners"
    );
}

fn has_python3() -> bool {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is needed for this test"
        );
        eprintln!("skipped: no python3 for the sandbox web server");
    }
    found
}

#[test]
fn user_config_ports_are_published_on_every_up_without_a_ports_command() {
    if !has_python3() {
        return;
    }
    let p = Project::new();
    let host = free_port();
    p.env
        .write_user_config(&format!("[[ports]]\nhost = {host}\nguest = 3000\n"));
    let plan = p.run(&["plan"]);
    plan.assert_code(0);
    let line = format!("127.0.0.1:{host} -> sandbox port 3000");
    assert!(plan.stdout.contains(&line), "{}", plan.stdout);
    p.up();
    serve_in_sandbox(&p, 3000);
    assert!(
        wait_until(Duration::from_secs(10), || get(host)
            .is_some_and(|b| b.contains("sandbox-page"))),
        "the sandbox page is not reachable on 127.0.0.1:{host} after up"
    );
    assert_eq!(published(&p), [(u64::from(host), 3000)]);
    // A second `up` finds the sandbox retained and the port already published: no warning.
    let again = p.run(&["up", "--no-attach"]);
    again.assert_code(0);
    // (Only the ports' own warning counts: an unprivileged invoker is also told it runs
    // without cgroup limits.)
    assert!(!again.stderr.contains("[[ports]]"), "{}", again.stderr);
    assert!(!again.stdout.contains("[[ports]]"), "{}", again.stdout);
    assert_eq!(published(&p), [(u64::from(host), 3000)]);
    // Unpublished by hand, the next `up` publishes it again.
    p.run(&["ports", "--unpublish", &host.to_string()])
        .assert_code(0);
    p.up();
    assert_eq!(published(&p), [(u64::from(host), 3000)]);
    assert!(get(host).is_some_and(|b| b.contains("sandbox-page")));
}

#[test]
fn user_config_port_in_use_is_a_warning_naming_it_and_up_succeeds() {
    let p = Project::new();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let free = free_port();
    p.env.write_user_config(&format!(
        "[[ports]]\nhost = {port}\nguest = 80\n[[ports]]\nhost = {free}\nguest = 81\n"
    ));
    let run = p.run(&["up", "--no-attach"]);
    run.assert_code(0);
    let out = format!("{}{}", run.stdout, run.stderr);
    let warning = out
        .lines()
        .find(|l| l.contains("warning") && l.contains(&format!("host port {port} ")))
        .unwrap_or_else(|| panic!("no warning naming port {port}:\n{out}"));
    assert!(warning.contains("in use"), "{warning}");
    assert_eq!(published(&p), [(u64::from(free), 81)]);
}

#[test]
fn project_config_with_ports_is_a_config_error() {
    let p = Project::new();
    p.env
        .write_project_config(&p.dir, "[[ports]]\nhost = 8080\nguest = 3000\n");
    let run = p.run(&["up", "--no-attach"]);
    run.assert_code(2);
    assert!(run.stderr.contains("ports"), "{}", run.stderr);
    assert!(run.stderr.contains("user config"), "{}", run.stderr);
    assert!(p.status()["ports"].as_array().is_none_or(|a| a.is_empty()));
}

#[test]
fn bad_user_config_ports_are_reported_together_before_anything_starts() {
    let p = Project::new();
    p.env.write_user_config(
        "[[ports]]\nhost = 0\nguest = 3000\n[[ports]]\nhost = 9000\nguest = 1\n\
         [[ports]]\nhost = 9000\nguest = 2\naddress = \"0.0.0.0\"\n",
    );
    let run = p.run(&["plan"]);
    run.assert_code(2);
    for key in ["ports[0].host", "ports[2].host", "ports[2].address"] {
        assert!(run.stderr.contains(key), "{key}: {}", run.stderr);
    }
    p.run(&["up", "--no-attach"]).assert_code(2);
    assert_ne!(p.health(), "ready");
}

/// Each verb names itself in its error code, so scripts can tell which command failed.
#[test]
fn ports_of_a_sandbox_that_is_not_up_fail_with_its_own_code() {
    let p = Project::new();
    for args in [&["ports"][..], &["push", "Cargo.toml", "/tmp/x"][..]] {
        let run = p.run(args);
        run.assert_code(1);
        let code = format!("error[{}.not_ready]", args[0]);
        assert!(run.stderr.contains(&code), "{}", run.stderr);
        assert!(run.stderr.contains("not ready"), "{}", run.stderr);
    }
}
