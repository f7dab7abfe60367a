//! `policy` and `secret` on a running `vm` sandbox under TCG, end to end: a live allow and deny
//! reach the host's proxy without a reboot, and a secret bound to a host is substituted by that proxy
//! while the guest only ever holds its placeholder. One boot, as whoever runs the suite: root
//! in the main pass of `scripts/test` (the guest's user is an id of a root invoker's range),
//! the test user in the unprivileged pass. The stand-in server, its CA, the secret and the
//! audit log are the network suite's (`network::live`).

use std::time::Duration;

use crate::lifecycle::{alive, wait_until, Project};
use crate::network::live::{audit_log, epoch, proxy_pids, secret_set};
use crate::network::{files_containing, https_server, user_config, TestCa, GREETING, SECRET_VALUE};

use super::QEMU;

/// `exec` of curl in the guest to `url` through the guest's relay (the proxy variables), with
/// `Authorization: Bearer $API_TOKEN`; then the guest's environment, its processes' and the
/// body curl received. Returns what the guest printed.
fn guest_request(p: &Project, url: &str) -> String {
    let script = format!(
        "curl -sS -m 60 -w '\\nconnect=%{{http_connect}} code=%{{http_code}}\\n' {url} \
           -H \"Authorization: Bearer $API_TOKEN\"; \
         env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; true"
    );
    let run = p.run(&["exec", "--", "sh", "-c", &script]);
    run.assert_code(0);
    format!("{}\n{}", run.stdout, run.stderr)
}

/// Whether the audit log has a line for `port` with `decision`, naming `secret` when given.
fn audited(p: &Project, port: u16, decision: &str, secret: Option<&str>) -> bool {
    audit_log(p)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|e| {
            e["port"] == port
                && e["decision"] == decision
                && secret.is_none_or(|s| {
                    e["secrets"]
                        .as_array()
                        .is_some_and(|a| a.contains(&s.into()))
                })
        })
}

#[test]
fn vm_backend_policy_allow_and_a_secret_apply_live_and_the_guest_never_holds_the_value() {
    if !airlock_testkit::needs_tool(QEMU) {
        return;
    }
    let Some(kernel) = super::needs_kernel() else {
        return;
    };
    let p = Project::new();
    let ca = TestCa::new(p.env.root());
    let secure = https_server(&ca, "secure.test", None);
    let host = format!("secure.test:{}", secure.port());
    let vm = format!(
        "\n[vm]\naccel = \"tcg\"\nkernel = {:?}\n",
        kernel.root.display().to_string()
    );
    p.env.write_user_config(&format!(
        "backend = \"vm\"\n{}",
        user_config(&[], Some(&ca), &vm)
    ));
    let up = p.run(&["up", "--no-attach", "--timeout", "10m", "--json"]);
    up.assert_code(0);
    let status = p.status();
    assert_eq!(status["backend"], "vm", "{status}");
    let qemu = status["guest"]["pid"].as_u64().expect("guest pid");
    let keeper = status["keeper"]["pid"].as_u64().expect("keeper pid");
    let before = epoch(&p);
    let url = format!("https://{host}/api");

    // Nothing allows the host: the proxy refuses the tunnel.
    let denied = guest_request(&p, &url);
    assert!(denied.contains("connect=403"), "{denied}");
    assert!(secure.seen.all().is_empty(), "a denied request got out");

    // A live allow and a secret bound to the host, both for the running VM.
    let allow = p.run(&["policy", "allow", &host, "--json"]);
    allow.assert_code(0);
    assert_eq!(allow.json()["applied_live"], true, "{}", allow.stdout);
    let set = secret_set(&p, "API_TOKEN", &host);
    assert_eq!(set["applied_live"], true, "{set}");

    let out = guest_request(&p, &url);
    assert!(
        out.contains(GREETING) && out.contains("code=200"),
        "the allowed request did not pass:\n{out}"
    );
    let placeholder = out
        .lines()
        .find_map(|l| l.strip_prefix("API_TOKEN="))
        .unwrap_or_else(|| panic!("API_TOKEN is not in the guest's environment:\n{out}"));
    assert!(placeholder.starts_with("airlock-secret-"), "{placeholder}");
    assert!(
        !out.contains(SECRET_VALUE),
        "the secret value is visible in the guest:\n{out}"
    );
    // The server got the real value (the host's proxy put it there), never the placeholder.
    let seen = secure.seen.all();
    assert!(seen.contains("GET /api HTTP/1.1"), "{seen}");
    assert!(
        seen.contains(&format!("authorization: Bearer {SECRET_VALUE}")),
        "the placeholder was not replaced:\n{seen}"
    );
    assert!(!seen.contains("airlock-secret-"), "{seen}");
    // The audit log has the denial and the allowed request naming the secret.
    assert!(
        wait_until(Duration::from_secs(10), || {
            audited(&p, secure.port(), "deny", None)
                && audited(&p, secure.port(), "allow", Some("API_TOKEN"))
        }),
        "the audit log lacks the denial or the allowed request:\n{}",
        audit_log(&p)
    );
    // A live deny closes the host again.
    let deny = p.run(&["policy", "deny", &host, "--json"]);
    deny.assert_code(0);
    assert_eq!(deny.json()["applied_live"], true, "{}", deny.stdout);
    let requests = seen.matches("GET ").count();
    let denied = guest_request(&p, &url);
    assert!(denied.contains("connect=403"), "{denied}");
    assert_eq!(secure.seen.all().matches("GET ").count(), requests);
    // The same VM throughout.
    assert_eq!(epoch(&p), before, "the sandbox was restarted");
    assert_eq!(p.status()["guest"]["pid"].as_u64(), Some(qemu));
    // The value is in the secret store and nowhere else under this world (state, runtime,
    // config, audit log, the workspace the guest shares).
    let store = p.env.data_home().join("airlock/secrets/API_TOKEN.json");
    assert_eq!(
        files_containing(p.env.root(), SECRET_VALUE.as_bytes()),
        vec![store]
    );

    p.run(&["down"]).assert_code(0);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(qemu)
            && !alive(keeper)
            && proxy_pids(&p).is_empty()),
        "QEMU ({qemu}), the keeper ({keeper}) or the proxy {:?} outlived down",
        proxy_pids(&p)
    );
    assert_eq!(p.health(), "absent");
    super::assert_nothing_left(&[
        p.runtime_root().join("sandboxes"),
        p.state_root().join("sandboxes"),
    ]);
}
