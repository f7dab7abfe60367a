//! N4: a request names its destination once. More than one `Host`, or a `Host` that disagrees
//! with the absolute URI or the CONNECT target, is refused with 400 — before policy, before
//! secrets, before any upstream connection.

use std::time::Duration;

use airlock_config::policy::Action;
use airlock_proxy::Verdict;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::common::*;

const API: &str = "api.test.example";
const OTHER: &str = "other.test.example";

fn allow(port: u16) -> airlock_config::policy::Policy {
    policy(vec![
        rule(Action::Allow, &format!("{API}:{port}")),
        rule(Action::Allow, &format!("{OTHER}:{port}")),
    ])
}

/// Writes `request` and reads the answer until the proxy closes (bounded).
async fn raw<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, request: &str) -> String {
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn assert_refused_before_upstream(answer: &str) {
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        !answer.contains("uri="),
        "the upstream was reached:\n{answer}"
    );
    assert!(!answer.contains(SECRET_VALUE), "{answer}");
}

#[tokio::test]
async fn two_host_headers_never_reach_the_bound_upstream_and_get_no_secret() {
    let (w, port) = http_world(API).await;
    let header = Some("Authorization: Bearer {value}");
    w.set_secret("TOKEN", &[&format!("{API}:{port}")], header, allow(port));
    for hosts in [
        [format!("{API}:{port}"), OTHER.to_owned()],
        [OTHER.to_owned(), format!("{API}:{port}")],
    ] {
        let request = format!(
            "GET http://{API}:{port}/x HTTP/1.1\r\nHost: {}\r\nHost: {}\r\nConnection: close\r\n\r\n",
            hosts[0], hosts[1]
        );
        let s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
        assert_refused_before_upstream(&raw(s, &request).await);
    }
    let audit = w.audit(2).await;
    for e in &audit {
        assert_eq!((e.status, e.decision), (400, Verdict::Deny), "{e:?}");
        assert!(e.secrets.is_empty(), "{e:?}");
        assert!(e.rule.contains("more than one Host"), "{}", e.rule);
    }
}

#[tokio::test]
async fn two_host_headers_inside_an_intercepted_connection_are_refused() {
    let (w, port) = https_world(API, true).await;
    let header = Some("Authorization: Bearer {value}");
    w.set_secret("TOKEN", &[&format!("{API}:{port}")], header, allow(port));
    let airlock_ca = w.proxy.ca().unwrap().cert_pem().to_owned();
    let (_, stream) = connect(w.addr, &format!("{API}:{port}")).await;
    let name = rustls::pki_types::ServerName::try_from(API).unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_tls(&[&airlock_ca]))
        .connect(name, stream.unwrap())
        .await
        .unwrap();
    let request = format!(
        "GET /x HTTP/1.1\r\nHost: {API}:{port}\r\nHost: {OTHER}\r\nConnection: close\r\n\r\n"
    );
    assert_refused_before_upstream(&raw(tls, &request).await);
    let audit = w.audit(1).await;
    assert_eq!(audit[0].status, 400, "{:?}", audit[0]);
    assert!(audit[0].secrets.is_empty());
}

#[tokio::test]
async fn host_header_of_another_host_inside_an_intercepted_connection_is_refused() {
    let (w, port) = https_world(API, true).await;
    w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow(port));
    let airlock_ca = w.proxy.ca().unwrap().cert_pem().to_owned();
    let (_, stream) = connect(w.addr, &format!("{API}:{port}")).await;
    let name = rustls::pki_types::ServerName::try_from(API).unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_tls(&[&airlock_ca]))
        .connect(name, stream.unwrap())
        .await
        .unwrap();
    let request = format!("GET /x HTTP/1.1\r\nHost: {OTHER}:{port}\r\nConnection: close\r\n\r\n");
    assert_refused_before_upstream(&raw(tls, &request).await);
}

#[tokio::test]
async fn connect_whose_host_header_names_another_host_is_refused() {
    let (w, port) = http_world(API).await;
    w.proxy.update(allow(port), w.bindings());
    for host_lines in [
        format!("Host: {OTHER}:{port}\r\n"),
        format!("Host: {API}:{port}\r\nHost: {OTHER}:{port}\r\n"),
    ] {
        let request =
            format!("CONNECT {API}:{port} HTTP/1.1\r\n{host_lines}Connection: close\r\n\r\n");
        let s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
        let answer = raw(s, &request).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
    // The same CONNECT with an agreeing Host (or none) is let through.
    let (ok, _) = connect(w.addr, &format!("{API}:{port}")).await;
    assert_eq!(ok.status, 200);
}
