//! N5/N8: placeholders become values only in headers of requests to bound hosts.

use airlock_config::policy::Action;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

use crate::common::*;

const API: &str = "api.test.example";
const OTHER: &str = "other.test.example";

async fn http_world() -> (World, u16) {
    let up = http_echo().await;
    let setup = Setup {
        policy: policy(vec![]),
        hosts: vec![(API, "127.0.0.1"), (OTHER, "127.0.0.1")],
        trust_test_ca: false,
        audit_rotation: Default::default(),
    };
    (World::start(setup, TestCa::new()).await, up.port())
}

fn allow_both(port: u16) -> airlock_config::policy::Policy {
    policy(vec![
        rule(Action::Allow, &format!("{API}:{port}")),
        rule(Action::Allow, &format!("{OTHER}:{port}")),
    ])
}

fn assert_no_value_outside_the_store(w: &World) {
    for (path, text) in w.files_outside_the_store() {
        assert!(
            !text.contains(SECRET_VALUE),
            "secret value found in {}",
            path.display()
        );
    }
}

#[tokio::test]
async fn placeholder_in_a_header_reaches_the_bound_host_as_the_value() {
    let (w, port) = http_world().await;
    let carriers = (None, &["X-Api-Key"][..]);
    let ph = w.set_secret_in(
        "TOKEN",
        &[&format!("{API}:{port}")],
        carriers,
        allow_both(port),
    );
    let a = http_via(
        w.addr,
        &format!("http://{API}:{port}/v1"),
        &[("x-api-key", &ph)],
        "",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.body.contains(&format!("h:x-api-key={SECRET_VALUE}\n")),
        "{}",
        a.body
    );
    let audit = w.audit(1).await;
    assert_eq!(audit[0].secrets, ["TOKEN"]);
    assert!(audit[0].warnings.is_empty(), "{:?}", audit[0].warnings);
    assert_no_value_outside_the_store(&w);
}

#[tokio::test]
async fn placeholder_inside_basic_credentials_is_replaced() {
    let (w, port) = http_world().await;
    let ph = w.set_secret(
        "GIT_TOKEN",
        &[&format!("{API}:{port}")],
        None,
        allow_both(port),
    );
    let basic = format!("Basic {}", BASE64.encode(format!("x-access-token:{ph}")));
    let a = http_via(
        w.addr,
        &format!("http://{API}:{port}/repo.git"),
        &[("authorization", &basic)],
        "",
    )
    .await;
    let expected = format!(
        "Basic {}",
        BASE64.encode(format!("x-access-token:{SECRET_VALUE}"))
    );
    assert!(
        a.body.contains(&format!("h:authorization={expected}\n")),
        "{}",
        a.body
    );
    assert_no_value_outside_the_store(&w);
}

#[tokio::test]
async fn header_template_replaces_the_client_header_instead_of_adding_a_second_one() {
    let (w, port) = http_world().await;
    w.set_secret(
        "API_KEY",
        &[&format!("{API}:{port}")],
        Some("Authorization: Bearer {value}"),
        allow_both(port),
    );
    let a = http_via(
        w.addr,
        &format!("http://{API}:{port}/"),
        &[("authorization", "Bearer made-up-by-the-agent")],
        "",
    )
    .await;
    assert_eq!(a.body.matches("h:authorization=").count(), 1, "{}", a.body);
    assert!(
        a.body
            .contains(&format!("h:authorization=Bearer {SECRET_VALUE}\n")),
        "{}",
        a.body
    );
    assert!(!a.body.contains("made-up-by-the-agent"));
    assert_eq!(w.audit(1).await[0].secrets, ["API_KEY"]);
}

#[tokio::test]
async fn placeholder_sent_to_an_unbound_host_is_left_alone_and_warned() {
    let (w, port) = http_world().await;
    let ph = w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow_both(port));
    let a = http_via(
        w.addr,
        &format!("http://{OTHER}:{port}/"),
        &[("x-api-key", &ph)],
        "",
    )
    .await;
    assert!(
        a.body.contains(&format!("h:x-api-key={ph}\n")),
        "{}",
        a.body
    );
    assert!(!a.body.contains(SECRET_VALUE));
    let entry = &w.audit(1).await[0];
    assert!(entry.secrets.is_empty());
    assert!(
        entry
            .warnings
            .iter()
            .any(|w| w.contains("TOKEN") && w.contains("header x-api-key")),
        "{:?}",
        entry.warnings
    );
    assert_no_value_outside_the_store(&w);
}

#[tokio::test]
async fn placeholder_in_query_or_body_of_a_bound_host_is_left_alone_and_warned() {
    let (w, port) = http_world().await;
    let ph = w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow_both(port));
    let url = format!("http://{API}:{port}/search?key={ph}");
    let a = http_via(w.addr, &url, &[], &format!("{{\"token\":\"{ph}\"}}")).await;
    assert!(
        a.body.contains(&format!("uri=/search?key={ph}\n")),
        "{}",
        a.body
    );
    assert!(
        a.body.contains(&format!("body={{\"token\":\"{ph}\"}}\n")),
        "{}",
        a.body
    );
    assert!(!a.body.contains(SECRET_VALUE));
    let entry = &w.audit(1).await[0];
    assert!(entry.secrets.is_empty());
    let warnings = entry.warnings.join("\n");
    assert!(warnings.contains("request target"), "{warnings}");
    assert!(warnings.contains("request body"), "{warnings}");
    assert_no_value_outside_the_store(&w);
}

#[tokio::test]
async fn intercepted_https_request_carries_the_value_only_upstream() {
    let (w, port) = https_world(API, true).await;
    let carriers = (None, &["x-api-key"][..]);
    let ph = w.set_secret_in(
        "TOKEN",
        &[&format!("{API}:{port}")],
        carriers,
        allow_both(port),
    );
    let r = w
        .https_intercepted(API, port, "/user", &[("x-api-key", &ph)])
        .await
        .unwrap();
    assert_eq!(r.answer.status, 200, "{}", r.answer.body);
    assert!(
        r.answer
            .body
            .contains(&format!("h:x-api-key={SECRET_VALUE}\n")),
        "{}",
        r.answer.body
    );
    let entry = &w.audit(1).await[0];
    assert_eq!(entry.mode, airlock_proxy::Mode::Intercept);
    assert_eq!(entry.secrets, ["TOKEN"]);
    assert_no_value_outside_the_store(&w);
}

/// Headers an echoing upstream would hand back to the sandbox, and which no binding names.
const ECHOED: [&str; 3] = ["x-echo", "cookie", "x-api-key"];

fn assert_unnamed_headers_kept_the_placeholder(body: &str, ph: &str) {
    // Only the Authorization line (a carrier) holds the value.
    assert_eq!(body.matches(SECRET_VALUE).count(), 1, "{body}");
    for h in ECHOED {
        assert!(body.contains(&format!("h:{h}={ph}\n")), "{h}: {body}");
    }
    // The default carrier still works in the same request.
    assert!(
        body.contains(&format!("h:authorization=Bearer {SECRET_VALUE}\n")),
        "{body}"
    );
}

fn assert_warned_per_header(w: &airlock_proxy::AuditEntry) {
    for h in ECHOED {
        let place = format!("header {h}");
        assert!(
            w.warnings
                .iter()
                .any(|t| t.contains("TOKEN") && t.contains(&place)),
            "{h}: {:?}",
            w.warnings
        );
    }
}

#[tokio::test]
async fn placeholder_in_a_header_the_binding_does_not_name_never_reaches_the_sandbox() {
    let (w, port) = http_world().await;
    let ph = w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow_both(port));
    let bearer = format!("Bearer {ph}");
    let mut headers: Vec<(&str, &str)> = ECHOED.iter().map(|h| (*h, ph.as_str())).collect();
    headers.push(("authorization", &bearer));
    let a = http_via(w.addr, &format!("http://{API}:{port}/"), &headers, "").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_unnamed_headers_kept_the_placeholder(&a.body, &ph);
    let entry = &w.audit(1).await[0];
    assert_eq!(entry.secrets, ["TOKEN"]);
    assert_warned_per_header(entry);
    assert_no_value_outside_the_store(&w);
}

#[tokio::test]
async fn intercepted_placeholder_in_an_unnamed_header_never_reaches_the_sandbox() {
    let (w, port) = https_world(API, true).await;
    let ph = w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow_both(port));
    let bearer = format!("Bearer {ph}");
    let mut headers: Vec<(&str, &str)> = ECHOED.iter().map(|h| (*h, ph.as_str())).collect();
    headers.push(("authorization", &bearer));
    let r = w.https_intercepted(API, port, "/", &headers).await.unwrap();
    assert_eq!(r.answer.status, 200, "{}", r.answer.body);
    assert_unnamed_headers_kept_the_placeholder(&r.answer.body, &ph);
    assert_warned_per_header(&w.audit(1).await[0]);
}

#[tokio::test]
async fn the_agent_catalogue_names_x_api_key_for_an_anthropic_key() {
    let (w, port) = https_world(API, true).await;
    let ph = w.set_secret(
        "ANTHROPIC_API_KEY",
        &[&format!("{API}:{port}")],
        None,
        allow_both(port),
    );
    let headers = [("x-api-key", ph.as_str()), ("x-echo", ph.as_str())];
    let r = w.https_intercepted(API, port, "/", &headers).await.unwrap();
    let body = &r.answer.body;
    assert!(
        body.contains(&format!("h:x-api-key={SECRET_VALUE}\n")),
        "{body}"
    );
    assert!(body.contains(&format!("h:x-echo={ph}\n")), "{body}");
}
