//! One policy snapshot per request (issue 8.4): a policy update that lands between the moment
//! a request reads the policy and the moment it uses it must not split the request between
//! two policies. The update is made by a test hook that runs right after the request's
//! snapshot, so the interleaving is the same on every run (no sleeps, no luck).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use airlock_config::policy::{Action, HostPattern, Policy, Rule, RuleOrigin};
use airlock_config::raw::Preset;
use airlock_secrets::{Binding, HeaderTemplate, Redacted, SecretBindings, SecretName};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::server::{Proxy, ProxyConfig, ProxyHandle, ProxyListener};

const HOST: &str = "api.snapshot.test";
const VALUE: &str = "snapshot-secret-value-77";

fn rule(action: Action, pattern: &str) -> Rule {
    Rule {
        action,
        pattern: HostPattern::parse(pattern).unwrap(),
        origin: RuleOrigin::User,
    }
}

fn secret_for(pattern: &str) -> SecretBindings {
    SecretBindings::new(vec![Binding {
        name: SecretName::parse("TOKEN").unwrap(),
        placeholder: "airlock-secret-00000000000000000000000000000001".into(),
        value: Redacted::new(VALUE.into()),
        hosts: vec![HostPattern::parse(pattern).unwrap()],
        header: Some(HeaderTemplate::parse("Authorization: Bearer {value}").unwrap()),
        headers: Vec::new(),
    }])
}

/// An HTTP server on loopback answering every request with its headers.
async fn echo_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let mut out = String::new();
                    for (k, v) in req.headers() {
                        out.push_str(&format!("{k}={}\n", String::from_utf8_lossy(v.as_bytes())));
                    }
                    Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(out))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

async fn start(policy: Policy, bindings: SecretBindings) -> (tempfile::TempDir, ProxyHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ProxyConfig {
        policy,
        hosts: BTreeMap::from([(HOST.to_owned(), "127.0.0.1".parse().unwrap())]),
        extra_roots: Vec::new(),
        bindings,
        audit_path: tmp.path().join("audit.jsonl"),
        audit_rotation: crate::audit::Rotation::default(),
        ca_dir: tmp.path().join("ca"),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = Proxy::start(cfg, ProxyListener::Tcp(listener)).unwrap();
    (tmp, proxy)
}

/// Sends raw `head` to the proxy; returns the status and everything read until close (or the
/// head only, for a 200 to a CONNECT).
async fn exchange(proxy: SocketAddr, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if text.starts_with("HTTP/1.1 200")
            && text.contains("\r\n\r\n")
            && head.starts_with("CONNECT")
        {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, text)
}

#[tokio::test]
async fn a_policy_update_mid_request_cannot_add_a_secret_the_deciding_policy_did_not_have() {
    let port = echo_upstream().await.port();
    let target = format!("{HOST}:{port}");
    // Policy A decides: the host is allowed and no secret is bound.
    let (_tmp, proxy) = start(
        Policy::new(Preset::None, vec![rule(Action::Allow, &target)]),
        SecretBindings::empty(),
    )
    .await;
    // Policy B arrives right after the request's snapshot: the host is denied, a secret bound.
    proxy.after_next_snapshot(Box::new(move |shared| {
        let deny = Policy::new(Preset::None, vec![rule(Action::Deny, &target)]);
        shared.replace_runtime(deny, secret_for(&target));
    }));
    let addr = proxy.local_tcp_addr().unwrap();
    let head = format!(
        "GET http://{HOST}:{port}/x HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n"
    );
    let (status, text) = exchange(addr, &head).await;
    // Consistent with A: forwarded without the secret. (B alone would have denied it.)
    assert_eq!(status, 200, "{text}");
    assert!(
        !text.contains(VALUE),
        "B's secret went out under A's decision:\n{text}"
    );
}

#[tokio::test]
async fn a_policy_update_mid_connect_cannot_turn_a_denial_into_an_interception() {
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = upstream.local_addr().unwrap().port();
    let target = format!("{HOST}:{port}");
    // Policy A decides: the host is denied (and has a bound secret).
    let (_tmp, proxy) = start(
        Policy::new(Preset::None, vec![rule(Action::Deny, &target)]),
        secret_for(&target),
    )
    .await;
    // Policy B arrives right after the CONNECT's snapshot: allowed, no secret.
    proxy.after_next_snapshot(Box::new(move |shared| {
        let allow = Policy::new(Preset::None, vec![rule(Action::Allow, &target)]);
        shared.replace_runtime(allow, SecretBindings::empty());
    }));
    let addr = proxy.local_tcp_addr().unwrap();
    let head = format!(
        "CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n"
    );
    let (status, text) = exchange(addr, &head).await;
    assert_eq!(
        status, 403,
        "decided under A, the CONNECT is denied:\n{text}"
    );
    drop(upstream);
}

#[tokio::test]
async fn the_snapshot_hook_really_runs_between_snapshot_and_use() {
    // Witness for the two tests above: without a hook the same request is forwarded with the
    // secret under B, so the hook is what changes the outcome, not some other difference.
    let port = echo_upstream().await.port();
    let target = format!("{HOST}:{port}");
    let (_tmp, proxy) = start(
        Policy::new(Preset::None, vec![rule(Action::Allow, &target)]),
        secret_for(&target),
    )
    .await;
    let addr = proxy.local_tcp_addr().unwrap();
    let head = format!(
        "GET http://{HOST}:{port}/x HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n"
    );
    let (status, text) = exchange(addr, &head).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(VALUE), "{text}");
}
