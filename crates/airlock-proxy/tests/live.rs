//! Live policy updates, the audit log, the Unix-socket listener and shutdown.

use airlock_config::policy::Action;
use airlock_proxy::{AuditFollower, Mode, Proxy, ProxyConfig, ProxyListener, Verdict};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::common::*;

const API: &str = "api.test.example";

#[tokio::test]
async fn policy_update_applies_to_the_next_request_without_restart() {
    let up = http_echo().await;
    let port = up.port();
    let setup = Setup {
        policy: policy(vec![]),
        hosts: vec![(API, "127.0.0.1")],
        trust_test_ca: false,
        audit_rotation: Default::default(),
    };
    let w = World::start(setup, TestCa::new()).await;
    let url = format!("http://{API}:{port}/");
    assert_eq!(http_via(w.addr, &url, &[], "").await.status, 403);
    w.proxy.update(
        policy(vec![rule(Action::Allow, &format!("{API}:{port}"))]),
        w.bindings(),
    );
    assert_eq!(http_via(w.addr, &url, &[], "").await.status, 200);
    w.proxy.update(
        policy(vec![
            rule(Action::Allow, &format!("{API}:{port}")),
            rule(Action::Deny, API),
        ]),
        w.bindings(),
    );
    assert_eq!(http_via(w.addr, &url, &[], "").await.status, 403);
}

#[tokio::test]
async fn audit_line_records_the_request_and_never_a_value() {
    let (w, port) = http_world(API).await;
    let mut follow = AuditFollower::from_end(&w.audit_path).unwrap();
    let allow = policy(vec![rule(Action::Allow, &format!("{API}:{port}"))]);
    let carriers = (None, &["x-key"][..]);
    let ph = w.set_secret_in("TOKEN", &[&format!("{API}:{port}")], carriers, allow);
    let a = http_via(
        w.addr,
        &format!("http://{API}:{port}/p"),
        &[("x-key", &ph)],
        "hello",
    )
    .await;
    assert_eq!(a.status, 200);
    let entries = w.audit(1).await;
    let e = &entries[0];
    assert_eq!(
        (e.method.as_str(), e.host.as_str(), e.port),
        ("POST", API, port)
    );
    assert_eq!(
        (e.decision, e.status, e.mode),
        (Verdict::Allow, 200, Mode::Http)
    );
    assert_eq!(e.rule, format!("allow {API}:{port} (user config)"));
    assert_eq!(e.bytes_up, 5);
    assert_eq!(e.bytes_down as usize, a.body.len());
    assert_eq!(e.secrets, ["TOKEN"]);
    assert_eq!(follow.poll().unwrap(), entries);
    let raw = std::fs::read_to_string(&w.audit_path).unwrap();
    assert!(!raw.contains(SECRET_VALUE));
    assert_eq!(raw.lines().count(), 1);
}

#[tokio::test]
async fn unix_socket_listener_serves_the_sandbox_and_shutdown_closes_it() {
    let up = http_echo().await;
    let port = up.port();
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("proxy.sock");
    let listener = tokio::net::UnixListener::bind(&sock).unwrap();
    let cfg = ProxyConfig {
        policy: policy(vec![rule(Action::Allow, &format!("{API}:{port}"))]),
        hosts: [(API.to_owned(), "127.0.0.1".parse().unwrap())].into(),
        extra_roots: vec![],
        bindings: airlock_secrets::SecretBindings::empty(),
        audit_path: tmp.path().join("audit.jsonl"),
        audit_rotation: airlock_proxy::Rotation::default(),
        ca_dir: tmp.path().join("ca"),
    };
    let proxy = Proxy::start(cfg, ProxyListener::Unix(listener)).unwrap();
    let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{API}:{port}/u"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("uri=/u"));
    proxy.shutdown().await;
    assert!(
        tokio::net::UnixStream::connect(&sock).await.is_err(),
        "a stopped proxy leaves the sandbox offline"
    );
}

#[tokio::test]
async fn config_from_the_effective_network_carries_policy_hosts_and_agent_rules() {
    use airlock_config::effective::{HostEntry, Network, Origin, Sourced};
    let up = http_echo().await;
    let port = up.port();
    let network = Network {
        preset: Sourced {
            value: airlock_config::raw::Preset::None,
            origin: Origin::User,
        },
        rules: vec![rule(Action::Allow, &format!("{API}:{port}"))],
        agent_hosts: vec![],
        ignored: vec![],
        hosts: vec![HostEntry {
            name: API.into(),
            address: "127.0.0.1".parse().unwrap(),
            origin: Origin::User,
        }],
        host_ports: vec![],
        extra_ca: vec![],
    };
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ProxyConfig::from_network(
        &network,
        airlock_secrets::SecretBindings::empty(),
        tmp.path().join("audit.jsonl"),
        tmp.path().join("ca"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = Proxy::start(cfg, ProxyListener::Tcp(listener)).unwrap();
    let addr = proxy.local_tcp_addr().unwrap();
    assert_eq!(
        http_via(addr, &format!("http://{API}:{port}/"), &[], "")
            .await
            .status,
        200
    );
    assert_eq!(
        http_via(addr, "http://elsewhere.test.example/", &[], "")
            .await
            .status,
        403
    );
}
