//! Persistent sandboxes: policy changes reach them without a restart, the proxy starts at the
//! first connection and again at the next one after it exited (offline while it is down, back
//! with the policy in force), host ports (N10).

use std::time::Duration;

use super::*;
use crate::lifecycle::{wait_until, Project};
use crate::runtime::harness::{ok, Rt};

/// `exec -- curl` of `url` through the proxy; returns the HTTP status curl saw (000: none).
fn status_of(p: &Project, url: &str) -> String {
    let run = p.run(&[
        "exec",
        "--",
        "curl",
        "-s",
        "-m",
        "5",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        url,
    ]);
    run.stdout.trim().to_owned()
}

/// Host pids of the `airlock __proxy` children serving this world's sandboxes.
pub fn proxy_pids(p: &Project) -> Vec<u32> {
    let runtime = p.runtime_root();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.get(1).map(String::as_str) == Some("__proxy")
            && args
                .get(2)
                .is_some_and(|d| Path::new(d).starts_with(&runtime))
        {
            pids.push(pid);
        }
    }
    pids
}

fn signal(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

pub fn epoch(p: &Project) -> serde_json::Value {
    p.status()["epoch"].clone()
}

#[test]
fn policy_allow_and_deny_apply_to_a_running_sandbox_without_restart() {
    let p = Project::new();
    let web = http_server(None);
    p.env.write_user_config(&user_config(&[], None, ""));
    p.up();
    let url = format!("http://web.test:{}/", web.port());
    let before = epoch(&p);
    assert_eq!(status_of(&p, &url), "403");
    let host = format!("web.test:{}", web.port());
    let allow = p.run(&["policy", "allow", &host, "--json"]);
    allow.assert_code(0);
    assert_eq!(allow.json()["applied_live"], true, "{}", allow.stdout);
    assert_eq!(status_of(&p, &url), "200");
    let deny = p.run(&["policy", "deny", &host, "--json"]);
    deny.assert_code(0);
    assert_eq!(deny.json()["applied_live"], true, "{}", deny.stdout);
    assert_eq!(status_of(&p, &url), "403");
    assert_eq!(epoch(&p), before, "the sandbox was restarted");
}

/// The sandbox's audit log.
pub fn audit_log(p: &Project) -> String {
    let name = p.status()["name"].as_str().unwrap().to_owned();
    std::fs::read_to_string(
        p.state_root()
            .join("sandboxes")
            .join(name)
            .join("audit.jsonl"),
    )
    .unwrap_or_default()
}

/// Issue 13: an idle sandbox that made no request runs no egress proxy; a policy change
/// before the first request still applies (the proxy, once started, loads the policy in
/// force), the first request goes through the proxy it starts and is audited, and `down`
/// leaves no proxy behind.
#[test]
fn the_proxy_starts_at_the_first_request_with_the_policy_changed_before_it() {
    let p = Project::new();
    let web = http_server(None);
    p.env.write_user_config(&user_config(&[], None, ""));
    p.up();
    p.run(&["exec", "--", "true"]).assert_code(0);
    assert!(proxy_pids(&p).is_empty(), "a proxy runs before any request");
    let host = format!("web.test:{}", web.port());
    let allow = p.run(&["policy", "allow", &host, "--json"]);
    allow.assert_code(0);
    assert_eq!(allow.json()["applied_live"], true, "{}", allow.stdout);
    assert!(proxy_pids(&p).is_empty(), "a reload started the proxy");

    let url = format!("http://{host}/first");
    assert_eq!(status_of(&p, &url), "200");
    let proxies = proxy_pids(&p);
    assert_eq!(proxies.len(), 1, "{proxies:?}");
    assert!(web.seen.all().contains("GET /first"));
    assert!(
        wait_until(Duration::from_secs(10), || {
            let log = audit_log(&p);
            log.contains(&format!("\"port\":{}", web.port()))
                && log.contains("\"decision\":\"allow\"")
        }),
        "the first request is not in the audit log: {}",
        audit_log(&p)
    );
    // The same proxy serves the next request.
    assert_eq!(status_of(&p, &format!("http://{host}/second")), "200");
    assert_eq!(proxy_pids(&p), proxies);

    let egress = p
        .runtime_root()
        .join("sandboxes")
        .join(p.status()["name"].as_str().unwrap());
    p.run(&["down"]).assert_code(0);
    assert!(
        wait_until(Duration::from_secs(5), || proxy_pids(&p).is_empty()),
        "down left the proxy running: {:?}",
        proxy_pids(&p)
    );
    assert!(!egress.exists(), "down left {}", egress.display());
}

#[test]
fn a_stopped_proxy_leaves_the_sandbox_offline_and_a_killed_one_returns_with_the_current_policy() {
    let p = Project::new();
    let web = http_server(None);
    let host = format!("web.test:{}", web.port());
    p.env
        .write_user_config(&user_config(std::slice::from_ref(&host), None, ""));
    p.up();
    let url = format!("http://web.test:{}/", web.port());
    assert_eq!(status_of(&p, &url), "200");
    let first = proxy_pids(&p);
    assert_eq!(first.len(), 1, "{first:?}");

    // Down (stopped): nothing gets out another way (fail closed).
    signal(first[0], "STOP");
    assert_eq!(status_of(&p, &url), "000");
    let seen_before = web.seen.all();

    // The user config changes behind the proxy's back; then the proxy dies. The keeper reaps
    // it and starts no other until a connection needs one.
    p.env.write_user_config(&user_config(&[], None, ""));
    signal(first[0], "KILL");
    assert!(
        wait_until(Duration::from_secs(10), || proxy_pids(&p).is_empty()),
        "the killed proxy is still there: {:?}",
        proxy_pids(&p)
    );
    // The next request starts it again, with the policy in force now (the allow rule is gone).
    assert_eq!(status_of(&p, &url), "403");
    let second = proxy_pids(&p);
    assert!(second.len() == 1 && second != first, "{second:?}");
    p.env
        .write_user_config(&user_config(std::slice::from_ref(&host), None, ""));
    signal(second[0], "KILL");
    assert!(wait_until(Duration::from_secs(10), || proxy_pids(&p).is_empty()));
    assert_eq!(status_of(&p, &url), "200");
    assert_eq!(seen_before.matches("GET ").count(), 1);
}

#[test]
fn a_configured_host_port_is_reachable_inside_and_no_other_host_port_is() {
    let rt = Rt::invoker();
    let exposed = http_server(None);
    let hidden = http_server(None);
    let extra = format!("\n[[network.host_port]]\nport = {}\n", exposed.port());
    rt.env.write_user_config(&user_config(&[], None, &extra));
    let run = rt.sh(
        &[],
        &format!(
            "curl -sS -m 10 http://127.0.0.1:{e}/db; echo exposed=$?; \
             curl -sS -m 5 --noproxy '*' http://127.0.0.1:{h}/ >/dev/null 2>&1; echo hidden=$?",
            e = exposed.port(),
            h = hidden.port()
        ),
    );
    let out = ok(&run);
    assert!(
        out.contains(GREETING) && out.contains("exposed=0"),
        "{out}\n{}",
        run.stderr
    );
    assert!(!out.contains("hidden=0"), "{out}");
    assert!(exposed.seen.all().contains("GET /db"));
    assert!(hidden.seen.all().is_empty());
    assert!(host_listens(hidden.port()));
}

/// `secret set NAME --host HOST --header-name x-token --json` with [`SECRET_VALUE`] on stdin;
/// returns the document.
pub fn secret_set(p: &Project, name: &str, host: &str) -> serde_json::Value {
    use std::io::Write;
    let args = [
        "secret",
        "set",
        name,
        "--host",
        host,
        "--header-name",
        "x-token",
        "--json",
    ];
    let mut cmd = p.command(&args);
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{SECRET_VALUE}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn secret_set_and_rm_apply_to_a_running_sandbox_without_restart() {
    let p = Project::new();
    let ca = TestCa::new(p.env.root());
    let secure = https_server(&ca, "secure.test", None);
    let host = format!("secure.test:{}", secure.port());
    p.env
        .write_user_config(&user_config(std::slice::from_ref(&host), Some(&ca), ""));
    // A secret from before the start keeps the host intercepted throughout.
    secret_set(&p, "EARLY_TOKEN", &host);
    p.up();
    let before = epoch(&p);
    let set = secret_set(&p, "LATE_TOKEN", &host);
    assert_eq!(set["applied_live"], true, "{set}");
    // The placeholder, as the sandbox sees it (exec adds secrets stored after the start).
    let env = p.run(&["exec", "--", "env"]);
    let placeholder = env
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("LATE_TOKEN="))
        .unwrap_or_else(|| panic!("LATE_TOKEN is not in the environment:\n{}", env.stdout))
        .to_owned();
    assert!(placeholder.starts_with("airlock-secret-"));
    assert!(!env.stdout.contains(SECRET_VALUE), "the value is inside");
    let send = |path: &str| {
        let script = format!("curl -sS -m 10 https://{host}/{path} -H 'X-Token: {placeholder}'");
        let run = p.run(&["exec", "--", "sh", "-c", &script]);
        assert!(
            run.stdout.contains(GREETING),
            "{}\n{}",
            run.stdout,
            run.stderr
        );
        let seen = secure.seen.all();
        seen.rsplit("----").next().unwrap().to_owned()
    };
    let last = send("set");
    assert!(
        last.contains(&format!("x-token: {SECRET_VALUE}")),
        "a secret set after the start was not substituted:\n{last}"
    );
    let rm = p.run(&["secret", "rm", "LATE_TOKEN", "--json"]);
    rm.assert_code(0);
    assert_eq!(rm.json()["applied_live"], true, "{}", rm.stdout);
    let last = send("removed");
    assert!(last.contains("GET /removed"), "{last}");
    assert!(
        last.contains(&format!("x-token: {placeholder}")),
        "a removed secret was still substituted:\n{last}"
    );
    assert_eq!(epoch(&p), before, "the sandbox was restarted");
}

#[test]
fn a_changed_hosts_map_reaches_a_running_sandbox_through_a_proxy_restart() {
    let p = Project::new();
    let web = http_server(None);
    let host = format!("web.test:{}", web.port());
    let without_map = format!("[network]\npreset = \"none\"\nallow = [{host:?}]\n");
    p.env.write_user_config(&without_map);
    p.up();
    let url = format!("http://{host}/");
    assert_ne!(
        status_of(&p, &url),
        "200",
        "web.test resolved without a map"
    );
    let first = proxy_pids(&p);
    p.env
        .write_user_config(&user_config(std::slice::from_ref(&host), None, ""));
    // Any reload request picks the change up; the map needs a fresh proxy.
    let allow = p.run(&["policy", "allow", "unrelated.example", "--json"]);
    assert_eq!(allow.json()["applied_live"], true, "{}", allow.stdout);
    assert!(
        wait_until(Duration::from_secs(10), || proxy_pids(&p) != first),
        "the proxy did not exit for the new hosts map"
    );
    // The next request starts a fresh one, with the map.
    assert!(wait_until(Duration::from_secs(10), || status_of(&p, &url) == "200"));
}

#[test]
fn a_proxy_that_cannot_restart_keeps_the_sandbox_offline_until_the_config_is_fixed() {
    let p = Project::new();
    let web = http_server(None);
    let host = format!("web.test:{}", web.port());
    let good = user_config(std::slice::from_ref(&host), None, "");
    p.env.write_user_config(&good);
    p.up();
    let url = format!("http://{host}/");
    assert_eq!(status_of(&p, &url), "200");
    let first = proxy_pids(&p);
    // A broken user config: the proxy cannot load a policy, so it must not come back with
    // none (or a stale one).
    p.env.write_user_config("[network\n");
    signal(first[0], "KILL");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        status_of(&p, &url),
        "000",
        "the sandbox got out without a proxy"
    );
    assert!(web.seen.all().matches("GET ").count() == 1);
    p.env.write_user_config(&good);
    assert!(
        wait_until(Duration::from_secs(10), || status_of(&p, &url) == "200"),
        "the proxy did not come back once the config was fixed"
    );
    let log = std::fs::read_to_string(
        p.state_root()
            .join("sandboxes")
            .join(p.status()["name"].as_str().unwrap())
            .join("keeper.log"),
    )
    .unwrap_or_default();
    // Tried again for the next connection after a failed start, at most once a second.
    let logged = log
        .lines()
        .filter(|l| l.contains("egress proxy could not start"))
        .count();
    assert!((1..=4).contains(&logged), "{log}");
}
