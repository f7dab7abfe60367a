//! N2/N3/N4/N9: every kind of refusal gives the same explicit answer and an audit line.

use airlock_config::policy::Action;
use airlock_proxy::Verdict;

use crate::common::*;

const API: &str = "api.test.example";

async fn world(
    rules: Vec<airlock_config::policy::Rule>,
    hosts: Vec<(&'static str, &'static str)>,
) -> World {
    let setup = Setup {
        policy: policy(rules),
        hosts,
        trust_test_ca: true,
        audit_rotation: Default::default(),
    };
    World::start(setup, TestCa::new()).await
}

#[tokio::test]
async fn unlisted_host_gets_the_n9_answer_identically_every_time() {
    let w = world(vec![], vec![("blocked.test.example", "203.0.113.9")]).await;
    let first = http_via(w.addr, "http://blocked.test.example/x", &[], "").await;
    let second = http_via(w.addr, "http://blocked.test.example/x", &[], "").await;
    assert_eq!(first.status, 403);
    let h = first.policy_header();
    assert!(h.contains("host=blocked.test.example:80"), "{h}");
    assert!(
        h.contains("rule=\"no rule allows it (preset none)\""),
        "{h}"
    );
    assert!(
        h.contains("allow=\"airlock policy allow blocked.test.example\""),
        "{h}"
    );
    assert!(
        first
            .body
            .contains("airlock policy allow blocked.test.example"),
        "{}",
        first.body
    );
    assert_eq!(
        (first.status, h, &first.body),
        (second.status, second.policy_header(), &second.body)
    );
    let (connect_answer, stream) = connect(w.addr, "blocked.test.example:443").await;
    assert!(stream.is_none());
    assert_eq!(connect_answer.status, 403);
    assert!(connect_answer
        .policy_header()
        .contains("host=blocked.test.example:443"));
    assert!(connect_answer
        .body
        .contains("airlock policy allow blocked.test.example"));
    let audit = w.audit(3).await;
    assert!(audit
        .iter()
        .all(|e| e.decision == Verdict::Deny && e.status == 403));
}

#[tokio::test]
async fn deny_rule_beats_allow_and_is_named_in_the_answer() {
    let w = world(
        vec![
            rule(Action::Allow, "**.test.example"),
            rule(Action::Deny, "bad.test.example"),
        ],
        vec![("bad.test.example", "203.0.113.9")],
    )
    .await;
    let (a, _) = connect(w.addr, "bad.test.example:443").await;
    assert_eq!(a.status, 403);
    assert!(
        a.policy_header()
            .contains("rule=\"deny bad.test.example (user config)\""),
        "{}",
        a.policy_header()
    );
}

#[tokio::test]
async fn ip_literal_target_is_refused_unless_a_rule_names_that_address() {
    let up = http_echo().await;
    let setup = Setup {
        policy: airlock_config::policy::Policy::new(airlock_config::raw::Preset::Open, vec![]),
        hosts: vec![],
        trust_test_ca: false,
        audit_rotation: Default::default(),
    };
    let w = World::start(setup, TestCa::new()).await;
    let url = format!("http://127.0.0.1:{}/", up.port());
    let a = http_via(w.addr, &url, &[], "").await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(
        a.policy_header().contains("IP-literal"),
        "{}",
        a.policy_header()
    );
    let (c, _) = connect(w.addr, "1.1.1.1:443").await;
    assert_eq!(c.status, 403);
    assert!(
        c.policy_header()
            .contains("allow=\"airlock policy allow 1.1.1.1\""),
        "{}",
        c.policy_header()
    );
    let exact = policy(vec![rule(
        Action::Allow,
        &format!("127.0.0.1:{}", up.port()),
    )]);
    w.proxy.update(exact, w.bindings());
    let ok = http_via(w.addr, &url, &[], "").await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[tokio::test]
async fn name_resolving_to_loopback_is_refused_unless_a_rule_names_that_exact_host() {
    let up = http_echo().await;
    let port = up.port();
    let w = world(
        vec![rule(Action::Allow, &format!("*.test.example:{port}"))],
        vec![("internal.test.example", "127.0.0.1")],
    )
    .await;
    let url = format!("http://internal.test.example:{port}/");
    let a = http_via(w.addr, &url, &[], "").await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(
        a.policy_header().contains("loopback address 127.0.0.1"),
        "{}",
        a.policy_header()
    );
    assert!(a.policy_header().contains(&format!(
        "allow=\"airlock policy allow internal.test.example:{port}\""
    )));
    let exact = policy(vec![rule(
        Action::Allow,
        &format!("internal.test.example:{port}"),
    )]);
    w.proxy.update(exact, w.bindings());
    assert_eq!(http_via(w.addr, &url, &[], "").await.status, 200);
}

#[tokio::test]
async fn tls_server_name_different_from_the_connect_host_is_refused() {
    let ca = TestCa::new();
    let up = https_echo(&ca, "evil.test.example").await;
    let port = up.port();
    let setup = Setup {
        policy: policy(vec![rule(Action::Allow, &format!("{API}:{port}"))]),
        hosts: vec![(API, "127.0.0.1")],
        trust_test_ca: true,
        audit_rotation: Default::default(),
    };
    let w = World::start(setup, ca).await;
    let roots = client_tls(&[&w.test_ca.cert.pem()]);
    let r = https_via(
        w.addr,
        &format!("{API}:{port}"),
        "evil.test.example",
        roots,
        "/",
        &[],
    )
    .await;
    let err = r
        .err()
        .expect("the SNI mismatch must not reach the upstream");
    assert!(err.contains("TLS"), "{err}");
    let entry = &w.audit(1).await[0];
    assert_eq!(entry.decision, Verdict::Deny);
    assert!(
        entry
            .rule
            .contains("evil.test.example differs from the CONNECT host"),
        "{}",
        entry.rule
    );
}

#[tokio::test]
async fn tls_client_hello_without_server_name_is_refused_for_a_name_target() {
    let (w, port) = https_world(API, true).await;
    let mut cfg = (*client_tls(&[&w.test_ca.cert.pem()])).clone();
    cfg.enable_sni = false;
    let r = https_via(
        w.addr,
        &format!("{API}:{port}"),
        API,
        std::sync::Arc::new(cfg),
        "/",
        &[],
    )
    .await;
    assert!(r.is_err());
    let entry = &w.audit(1).await[0];
    assert!(
        entry.rule.contains("without a server name"),
        "{}",
        entry.rule
    );
}

#[tokio::test]
async fn non_tls_bytes_after_connect_to_a_name_are_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (w, port) = http_world(API).await;
    let (_, stream) = connect(w.addr, &format!("{API}:{port}")).await;
    let mut s = stream.unwrap();
    let request = format!("GET / HTTP/1.1\r\nHost: {API}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out));
    let _ = read.await;
    assert!(
        !String::from_utf8_lossy(&out).contains("uri="),
        "the upstream must not be reached"
    );
    assert!(w.audit(1).await[0].rule.contains("must carry TLS"));
}

#[tokio::test]
async fn host_header_disagreeing_with_the_request_target_is_refused() {
    let (w, port) = http_world(API).await;
    let a = http_via(
        w.addr,
        &format!("http://{API}:{port}/"),
        &[("host", "metadata.google.internal")],
        "",
    )
    .await;
    // N4: a bad request (400), not a policy denial; the rule is named in the body and log.
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.body
            .contains("Host header metadata.google.internal differs"),
        "{}",
        a.body
    );
    assert!(!a.body.contains("uri="), "{}", a.body);
    assert_eq!(w.audit(1).await[0].decision, Verdict::Deny);
}
