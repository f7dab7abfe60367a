//! `airlock run` sandboxes against loopback servers: allowed, denied, bypass attempts, secret
//! substitution through TLS interception (N1–N9).

use super::*;
use crate::runtime::harness::{ok, Rt};

fn allowed(name: &str, server: &Server) -> String {
    format!("{name}:{}", server.port())
}

fn curl_reaches_an_allowed_http_server(rt: Rt) {
    let web = http_server(None);
    rt.env
        .write_user_config(&user_config(&[allowed("web.test", &web)], None, ""));
    let run = rt.sh(
        &[],
        &format!("curl -sS -m 20 http://web.test:{}/hello?q=1", web.port()),
    );
    assert_eq!(ok(&run), GREETING, "{}", run.stderr);
    let seen = web.seen.all();
    assert!(seen.starts_with("GET /hello?q=1 HTTP/1.1"), "{seen}");
    assert!(
        seen.to_ascii_lowercase().contains("host: web.test:"),
        "{seen}"
    );
}

#[test]
fn curl_reaches_an_allowed_loopback_http_server_through_the_proxy() {
    curl_reaches_an_allowed_http_server(Rt::invoker());
}

#[test]
fn curl_reaches_an_allowed_server_through_the_proxy_as_an_unprivileged_user() {
    if let Some(rt) = Rt::unprivileged() {
        curl_reaches_an_allowed_http_server(rt);
    }
}

#[test]
fn a_denied_host_gets_the_explicit_403_with_x_airlock_policy_for_http_and_connect() {
    let rt = Rt::invoker();
    let web = http_server(None);
    let other = http_server(None);
    rt.env
        .write_user_config(&user_config(&[allowed("web.test", &web)], None, ""));
    let run = rt.sh(
        &[],
        &format!(
            "curl -sS -m 20 -i http://other.test:{p}/; echo; \
             curl -sS -m 20 https://other.test:{p}/ 2>&1; echo connect=$?",
            p = other.port()
        ),
    );
    let out = ok(&run);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    let header = out
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("x-airlock-policy:"))
        .unwrap_or_else(|| panic!("no X-Airlock-Policy header in\n{out}"));
    assert!(header.contains("other.test"), "{header}");
    assert!(header.contains("airlock policy allow"), "{header}");
    // CONNECT is answered with the same 403: curl reports the refused tunnel.
    assert!(out.contains("403"), "{out}");
    assert!(!out.contains("connect=0"), "{out}");
    assert!(
        other.seen.all().is_empty(),
        "a denied request reached the server"
    );
}

#[test]
fn a_finished_runs_audit_log_is_kept_in_run_logs_and_its_state_directory_removed() {
    let rt = Rt::invoker();
    let web = http_server(None);
    rt.env.write_user_config(&user_config(&[], None, ""));
    let run = rt.sh(
        &[],
        &format!(
            "curl -sS -m 20 -o /dev/null http://denied.test:{}/",
            web.port()
        ),
    );
    run.assert_code(0);
    let state = rt.env.state_home().join("airlock");
    let runs: Vec<_> = std::fs::read_dir(state.join("runs"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(runs.is_empty(), "run state left behind: {runs:?}");
    let kept: Vec<_> = std::fs::read_dir(state.join("run-logs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let log = std::fs::read_to_string(kept[0].join("audit.jsonl")).unwrap();
    assert!(log.contains("denied.test"), "{log}");
}

/// Watches the host's processes while `script` runs in a sandbox of `rt`; whether an egress
/// proxy child of that sandbox (`__proxy` with a directory below the test's runtime root) ran.
fn proxy_ran_during(rt: &Rt, script: &str) -> (bool, crate::common::Run) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let needle = rt.env.runtime_dir.to_string_lossy().into_owned();
    let (seen, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let watcher = {
        let (seen, done) = (seen.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let procs = std::fs::read_dir("/proc").into_iter().flatten().flatten();
                for p in procs {
                    let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
                    let cmd = String::from_utf8_lossy(&cmd);
                    if cmd.contains("__proxy") && cmd.contains(&needle) {
                        seen.store(true, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        })
    };
    let run = rt.sh(&[], script);
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    (seen.load(Ordering::SeqCst), run)
}

#[test]
fn a_run_whose_command_makes_no_request_starts_no_proxy_and_one_that_does_is_audited() {
    let rt = Rt::invoker();
    let web = http_server(None);
    rt.env
        .write_user_config(&user_config(&[allowed("web.test", &web)], None, ""));
    // The sockets exist from the start (socket activation), but nothing serves them yet.
    let (ran, run) = proxy_ran_during(&rt, "test -S /run/airlock/proxy.sock && sleep 1");
    run.assert_code(0);
    assert!(!ran, "a proxy child ran for a command that made no request");
    let state = rt.env.state_home().join("airlock");
    let logs = |dir: &str| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(state.join(dir))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    assert!(logs("run-logs").is_empty(), "{:?}", logs("run-logs"));
    // The first request starts it, with the policy and the audit log of any proxy.
    let (ran, run) = proxy_ran_during(
        &rt,
        &format!(
            "curl -sS -m 20 http://web.test:{}/hello; echo; \
             curl -sS -m 20 -o /dev/null -w '%{{http_code}}' http://denied.test:{}/; sleep 1",
            web.port(),
            web.port()
        ),
    );
    let out = ok(&run);
    assert!(ran, "no proxy child ran for a command that made requests");
    assert!(out.starts_with(GREETING), "{out}");
    assert!(out.trim_end().ends_with("403"), "{out}");
    let kept = logs("run-logs");
    assert_eq!(kept.len(), 1, "{kept:?}");
    let log = std::fs::read_to_string(kept[0].join("audit.jsonl")).unwrap();
    assert!(
        log.contains("web.test") && log.contains("denied.test"),
        "{log}"
    );
    assert!(logs("runs").is_empty(), "{:?}", logs("runs"));
}

#[test]
fn a_process_ignoring_the_proxy_variables_cannot_connect_anywhere() {
    let rt = Rt::invoker();
    let web = http_server(None);
    rt.env
        .write_user_config(&user_config(&[allowed("web.test", &web)], None, ""));
    // Direct connections: the host's loopback server, the name without the proxy, and an
    // outside address. The sandbox's network namespace has loopback only (I9, N1).
    let script = format!(
        "curl -sS -m 5 --noproxy '*' http://127.0.0.1:{p}/ >/dev/null 2>&1; echo a=$?; \
         env -u http_proxy -u HTTP_PROXY -u ALL_PROXY -u all_proxy \
           curl -sS -m 5 http://web.test:{p}/ >/dev/null 2>&1; echo b=$?; \
         curl -sS -m 5 --noproxy '*' http://1.1.1.1/ >/dev/null 2>&1; echo c=$?; \
         ip -o addr 2>/dev/null | grep -v ' lo ' | grep -c inet || true",
        p = web.port()
    );
    let run = rt.sh(&[], &script);
    let out = ok(&run);
    for key in ["a=", "b=", "c="] {
        let line = out.lines().find(|l| l.starts_with(key)).unwrap();
        assert_ne!(
            line,
            format!("{key}0"),
            "a direct connection succeeded: {out}"
        );
    }
    assert!(web.seen.all().is_empty(), "the server was reached directly");
}

#[test]
fn https_to_a_secret_bound_host_carries_the_real_value_while_the_sandbox_sees_a_placeholder() {
    let rt = Rt::invoker();
    let ca = TestCa::new(rt.env.root());
    let secure = https_server(&ca, "secure.test", None);
    let host = allowed("secure.test", &secure);
    rt.env
        .write_user_config(&user_config(std::slice::from_ref(&host), Some(&ca), ""));
    let set = rt.run_args(
        &[
            "secret",
            "set",
            "API_TOKEN",
            "--host",
            &host,
            "--header",
            "Authorization: Bearer {value}",
            "--header-name",
            "X-Token",
        ],
        Some(format!("{SECRET_VALUE}\n").as_bytes()),
    );
    set.assert_code(0);
    // No certificate flag: the interception CA is in the bundle the variables point at, and in
    // the system bundle itself.
    let script = format!(
        "curl -sS -m 20 https://secure.test:{p}/api -H \"X-Token: $API_TOKEN\" && \
         curl -sS -m 20 --cacert /etc/ssl/certs/ca-certificates.crt \
           https://secure.test:{p}/again && \
         echo \"placeholder=$API_TOKEN\"; \
         env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; \
         cat /run/airlock/*.crt; ls -a /run/airlock; true",
        p = secure.port()
    );
    let run = rt.sh(&[], &script);
    let out = ok(&run);
    assert!(out.contains(GREETING), "{out}\n{}", run.stderr);
    assert!(out.contains("placeholder=airlock-secret-"), "{out}");
    assert!(
        !out.contains(SECRET_VALUE),
        "the secret value is visible inside the sandbox"
    );
    // N6: the CA's certificate is inside (the bundles end with it), never its key.
    assert!(out.contains("BEGIN CERTIFICATE"), "{out}");
    assert!(
        !out.contains("PRIVATE KEY"),
        "a private key is inside the sandbox"
    );
    let seen = secure.seen.all();
    assert!(seen.contains("GET /api HTTP/1.1"), "{seen}");
    assert!(
        seen.contains(&format!("x-token: {SECRET_VALUE}")),
        "the placeholder was not replaced in the header:\n{seen}"
    );
    assert!(
        seen.to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            SECRET_VALUE.to_ascii_lowercase()
        )),
        "the header template was not applied:\n{seen}"
    );
    assert!(
        !seen.contains("airlock-secret-"),
        "a placeholder reached the server:\n{seen}"
    );
    // N8: the value is in the secret store and nowhere else airlock writes (state, runtime,
    // config, audit log), nor in what it printed.
    let hits = files_containing(rt.env.root(), SECRET_VALUE.as_bytes());
    let store = rt.env.data_home().join("airlock/secrets/API_TOKEN.json");
    assert_eq!(hits, vec![store], "the secret value is in other files");
    assert!(!run.stderr.contains(SECRET_VALUE) && !set.stdout.contains(SECRET_VALUE));
    // N7: the audit log names the secret, never its value.
    let audits = files_containing(&rt.env.state_home(), b"API_TOKEN");
    assert!(
        audits.iter().any(|p| p.ends_with("audit.jsonl")),
        "no audit entry names the secret: {audits:?}"
    );
}

#[test]
fn a_placeholder_sent_to_another_host_is_not_replaced() {
    let rt = Rt::invoker();
    let web = http_server(None);
    rt.env
        .write_user_config(&user_config(&[allowed("web.test", &web)], None, ""));
    rt.run_args(
        &["secret", "set", "API_TOKEN", "--host", "secure.test"],
        Some(format!("{SECRET_VALUE}\n").as_bytes()),
    )
    .assert_code(0);
    let run = rt.sh(
        &[],
        &format!(
            "curl -sS -m 20 http://web.test:{}/ -H \"X-Token: $API_TOKEN\"",
            web.port()
        ),
    );
    ok(&run);
    let seen = web.seen.all();
    assert!(seen.contains("x-token: airlock-secret-"), "{seen}");
    assert!(
        !seen.contains(SECRET_VALUE),
        "substituted for an unbound host"
    );
}

#[test]
fn tunnelled_https_is_not_intercepted_and_the_client_verifies_the_real_server() {
    let rt = Rt::invoker();
    let ca = TestCa::new(rt.env.root());
    let web = https_server(&ca, "web.test", None);
    rt.env
        .write_user_config(&user_config(&[allowed("web.test", &web)], None, ""));
    // The test CA must be readable inside: put a copy in the workspace.
    let inside = rt.project.join("upstream-ca.pem");
    std::fs::copy(&ca.pem_path, &inside).unwrap();
    let run = rt.sh(
        &[],
        &format!(
            "curl -sS -m 20 --cacert {ca} https://web.test:{p}/t; echo with=$?; \
             curl -sS -m 20 https://web.test:{p}/t >/dev/null 2>&1; echo without=$?",
            ca = inside.display(),
            p = web.port()
        ),
    );
    let out = ok(&run);
    assert!(out.contains(GREETING) && out.contains("with=0"), "{out}");
    // Without the upstream's CA the client refuses: the proxy did not substitute its own
    // certificate (no secret is bound to this host).
    assert!(!out.contains("without=0"), "{out}");
}

#[test]
fn a_run_leaves_no_egress_directory_and_sweeps_those_of_killed_runs() {
    let rt = Rt::invoker();
    rt.env.write_user_config(&user_config(&[], None, ""));
    let base = rt.env.runtime_dir.join("airlock/egress");
    // A run killed before its cleanup (its owner is provably gone), and a live one (this test
    // process) that must be left alone.
    let dead = base.join("run-1-dead");
    let live = base.join("run-2-live");
    for dir in [&dead, &live] {
        std::fs::create_dir_all(dir.join("relay")).unwrap();
    }
    std::fs::write(dead.join("owner"), "999999999 1\n").unwrap();
    let me = std::fs::read_to_string("/proc/self/stat").unwrap();
    let start = me[me.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_owned();
    std::fs::write(
        live.join("owner"),
        format!("{} {start}\n", std::process::id()),
    )
    .unwrap();
    ok(&rt.sh(&[], "test -S /run/airlock/proxy.sock"));
    let left: Vec<_> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left, vec![live], "egress directories left behind");
}

#[test]
fn the_selected_agents_api_hosts_pass_the_proxy_whatever_the_preset() {
    let rt = Rt::invoker();
    // Preset none; the agent is codex (A1: its API hosts are allowed), not claude.
    rt.env.write_user_config(&format!(
        "agent = \"codex\"\n{}",
        user_config(&[], None, "")
    ));
    let run = rt.sh(
        &[],
        "for h in api.openai.com api.anthropic.com; do \
           printf '%s ' $h; curl -s -m 10 -o /dev/null -D - http://$h/ | \
             grep -i -c '^x-airlock-policy: denied' || true; done",
    );
    let out = ok(&run);
    // The agent's host is not refused by policy (it fails later: no DNS on a test machine),
    // another agent's host is.
    assert!(out.contains("api.openai.com 0"), "{out}\n{}", run.stderr);
    assert!(out.contains("api.anthropic.com 1"), "{out}\n{}", run.stderr);
}

#[test]
fn a_tls_server_name_other_than_the_connect_host_is_refused_inside_the_sandbox() {
    let rt = Rt::invoker();
    let ca = TestCa::new(rt.env.root());
    let web = https_server(&ca, "web.test", None);
    rt.env
        .write_user_config(&user_config(&[allowed("web.test", &web)], None, ""));
    // CONNECT to an allowed host, then a ClientHello naming another one (N4).
    let hello = |sni: &str| {
        format!(
            "openssl s_client -proxy 127.0.0.1:3128 -connect web.test:{} -servername {sni} \
             </dev/null 2>&1 | grep -c 'alert access denied' || true",
            web.port()
        )
    };
    let run = rt.sh(
        &[],
        &format!(
            "printf 'evil '; {}; printf 'same '; {}",
            hello("evil.example"),
            hello("web.test")
        ),
    );
    let out = ok(&run);
    assert!(
        out.contains("evil 1"),
        "a mismatching SNI was tunnelled:\n{out}\n{}",
        run.stderr
    );
    assert!(out.contains("same 0"), "{out}");
}

#[test]
fn ip_literals_internal_names_under_wildcards_and_host_mismatches_are_refused() {
    let rt = Rt::invoker();
    let web = http_server(None);
    let p = web.port();
    // web.test is allowed exactly; a.net.test (also mapped to 127.0.0.1) only by a wildcard,
    // which never opens an internal address (N3).
    let cfg = user_config(
        &[allowed("web.test", &web), format!("*.net.test:{p}")],
        None,
        "\"a.net.test\" = \"127.0.0.1\"\n",
    );
    rt.env.write_user_config(&cfg);
    let code = |args: &str| {
        format!(
            "curl -s -m 10 -o /dev/null -w '%{{http_code}}\\n' --noproxy '' \
             -x http://127.0.0.1:3128 {args}; "
        )
    };
    let script = [
        code(&format!("http://127.0.0.1:{p}/")),
        code(&format!("http://a.net.test:{p}/")),
        code(&format!("http://web.test:{p}/ -H 'Host: other.test:{p}'")),
        code(&format!("http://web.test:{p}/")),
    ]
    .concat();
    let run = rt.sh(&[], &script);
    let codes: Vec<&str> = ok(&run).lines().collect();
    // A Host that disagrees with the target is a bad request (N4: 400), the others denials.
    assert_eq!(codes, ["403", "403", "400", "200"], "{}", run.stderr);
    assert_eq!(web.seen.all().matches("GET ").count(), 1);
}
