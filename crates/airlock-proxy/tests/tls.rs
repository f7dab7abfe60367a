//! N6: tunnelled TLS is untouched; TLS to hosts with bound secrets is intercepted with the
//! installation CA and verified upstream.

use std::os::unix::fs::PermissionsExt;

use airlock_config::policy::Action;
use airlock_proxy::{CertificateAuthority, Mode};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;

use crate::common::*;

const API: &str = "api.test.example";

fn allow(port: u16) -> airlock_config::policy::Policy {
    policy(vec![rule(Action::Allow, &format!("{API}:{port}"))])
}

#[tokio::test]
async fn tunnelled_tls_shows_the_client_the_servers_own_certificate() {
    let (w, port) = https_world(API, false).await;
    let roots = client_tls(&[&w.test_ca.cert.pem()]);
    let r = https_via(w.addr, &format!("{API}:{port}"), API, roots, "/t", &[])
        .await
        .unwrap();
    assert_eq!(r.answer.status, 200);
    assert!(der_contains(&r.peer, "airlock test upstream CA"));
    assert!(!der_contains(&r.peer, "airlock sandbox interception CA"));
    let entry = &w.audit(1).await[0];
    assert_eq!(entry.mode, Mode::Tunnel);
    assert_eq!(entry.method, "CONNECT");
    assert!(entry.bytes_up > 0 && entry.bytes_down > 0, "{entry:?}");
    assert!(
        !w.ca_dir.exists(),
        "no CA is created while nothing needs interception"
    );
    assert!(
        !w.proxy.upstream_trust_built(),
        "a tunnel never reads the upstream trust store"
    );
}

#[tokio::test]
async fn tls_to_a_host_with_a_bound_secret_is_intercepted_with_an_airlock_leaf() {
    let (w, port) = https_world(API, true).await;
    w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow(port));
    assert!(
        !w.proxy.upstream_trust_built(),
        "the upstream trust store is not read at start"
    );
    let r = w.https_intercepted(API, port, "/i", &[]).await.unwrap();
    assert_eq!(r.answer.status, 200, "{}", r.answer.body);
    assert!(der_contains(&r.peer, "airlock sandbox interception CA"));
    assert_eq!(r.answer.headers["x-upstream"], "echo");
    assert!(w.proxy.upstream_trust_built());
    let only_upstream_ca = client_tls(&[&w.test_ca.cert.pem()]);
    let refused = https_via(
        w.addr,
        &format!("{API}:{port}"),
        API,
        only_upstream_ca,
        "/i",
        &[],
    )
    .await;
    assert!(
        refused.is_err(),
        "the client must not see the upstream's own certificate"
    );
}

#[tokio::test]
async fn intercepted_upstream_with_an_untrusted_certificate_is_not_reached() {
    let (w, port) = https_world(API, false).await;
    w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow(port));
    let r = w.https_intercepted(API, port, "/", &[]).await.unwrap();
    assert_eq!(r.answer.status, 502);
    assert!(
        r.answer.body.contains("upstream TLS verification failed"),
        "{}",
        r.answer.body
    );
    assert!(
        !r.answer.body.contains("uri="),
        "no request may reach an unverified upstream"
    );
}

#[tokio::test]
async fn an_unusable_system_trust_store_is_a_502_at_first_use_and_never_a_pass() {
    let roots = tempfile::tempdir().unwrap();
    let bundle = roots.path().join("ca-certificates.crt");
    std::fs::write(&bundle, "no certificate in here\n").unwrap();
    let system = airlock_proxy::tls::SystemRoots::Bundle(bundle);
    let (w, port) = https_world_with(API, false, Some(system)).await;
    w.set_secret("TOKEN", &[&format!("{API}:{port}")], None, allow(port));
    for attempt in 0..2 {
        let r = w.https_intercepted(API, port, "/", &[]).await.unwrap();
        assert_eq!(r.answer.status, 502, "attempt {attempt}");
        assert!(
            r.answer.body.contains("upstream trust store")
                && r.answer.body.contains("no trusted root certificates"),
            "{}",
            r.answer.body
        );
        assert!(!r.answer.body.contains("uri="), "the upstream was reached");
    }
    let audit = w.audit(2).await;
    assert!(audit.iter().all(|e| e.status == 502), "{audit:?}");
    assert!(!w.proxy.upstream_trust_built());
}

#[test]
fn the_public_certificate_read_alone_is_the_cas_and_creates_it_private_on_first_use() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ca");
    let fresh = CertificateAuthority::public_cert_pem(&dir).unwrap();
    assert!(fresh.contains("BEGIN CERTIFICATE") && !fresh.contains("PRIVATE KEY"));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("ca-key.pem")), 0o600);
    let loaded = CertificateAuthority::load_or_create(&dir).unwrap();
    assert_eq!(loaded.cert_pem(), fresh);
    assert_eq!(CertificateAuthority::public_cert_pem(&dir).unwrap(), fresh);
}

#[tokio::test]
async fn ca_key_is_private_and_the_ca_is_stable_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ca");
    let first = CertificateAuthority::load_or_create(&dir).unwrap();
    let second = CertificateAuthority::load_or_create(&dir).unwrap();
    assert_eq!(first.cert_pem(), second.cert_pem());
    let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("ca-key.pem"), 0o600);
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert!(!first.cert_pem().contains("PRIVATE KEY"));
    assert!(!format!("{first:?}").contains("PRIVATE"));
    // A leaf issued after a restart still chains to the certificate written at first use.
    let leaf = second.leaf("api.test.example").unwrap();
    let mut store = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(first.cert_pem().as_bytes()) {
        store.add(c.unwrap()).unwrap();
    }
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(store.into(), provider())
            .build()
            .unwrap();
    let name = rustls::pki_types::ServerName::try_from("api.test.example").unwrap();
    let now = rustls::pki_types::UnixTime::now();
    verifier
        .verify_server_cert(&leaf.cert[0], &[], &name, &[], now)
        .unwrap();
}

#[tokio::test]
async fn concurrent_first_use_agrees_on_one_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ca");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                CertificateAuthority::load_or_create(&dir)
                    .unwrap()
                    .cert_pem()
                    .to_owned()
            })
        })
        .collect();
    let pems: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let on_disk = std::fs::read_to_string(dir.join("ca.pem")).unwrap();
    assert!(pems.iter().all(|p| *p == on_disk));
}

#[tokio::test]
async fn requests_reusing_one_intercepted_connection_each_get_the_value() {
    let (w, port) = https_world(API, true).await;
    let carriers = (None, &["x-api-key"][..]);
    let ph = w.set_secret_in("TOKEN", &[&format!("{API}:{port}")], carriers, allow(port));
    let airlock_ca = w.proxy.ca().unwrap().cert_pem().to_owned();
    let (_, stream) = connect(w.addr, &format!("{API}:{port}")).await;
    let name = rustls::pki_types::ServerName::try_from(API).unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_tls(&[&airlock_ca]))
        .connect(name, stream.unwrap())
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    for i in 0..3 {
        sender.ready().await.unwrap();
        let (_, body) = get_with_key(
            &mut sender,
            &format!("{API}:{port}"),
            &format!("/n{i}"),
            &ph,
        )
        .await;
        assert!(body.contains(&format!("uri=/n{i}\n")), "{body}");
        assert!(
            body.contains(&format!("h:x-api-key={SECRET_VALUE}\n")),
            "{body}"
        );
    }
    let audit = w.audit(3).await;
    assert!(audit
        .iter()
        .all(|e| e.mode == Mode::Intercept && e.secrets == ["TOKEN"]));
}

#[tokio::test]
async fn a_second_intercepted_connection_to_a_host_resumes_its_tls_session() {
    let (w, port) = https_world(API, true).await;
    let carriers = (None, &["x-api-key"][..]);
    let ph = w.set_secret_in("TOKEN", &[&format!("{API}:{port}")], carriers, allow(port));
    let airlock_ca = w.proxy.ca().unwrap().cert_pem().to_owned();
    // One client configuration (and so one client session cache) for both connections.
    let client = client_tls(&[&airlock_ca]);
    let mut kinds = Vec::new();
    for i in 0..2 {
        let (_, stream) = connect(w.addr, &format!("{API}:{port}")).await;
        let name = rustls::pki_types::ServerName::try_from(API).unwrap();
        let tls = tokio_rustls::TlsConnector::from(client.clone())
            .connect(name, stream.unwrap())
            .await
            .unwrap();
        kinds.push(tls.get_ref().1.handshake_kind());
        let peer = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        assert!(der_contains(&peer, API), "the leaf names the host");
        // Reading the answer also reads the session tickets the proxy sent.
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(conn);
        let (status, body) = get_with_key(
            &mut sender,
            &format!("{API}:{port}"),
            &format!("/r{i}"),
            &ph,
        )
        .await;
        assert_eq!(status, 200);
        assert!(
            body.contains(&format!("h:x-api-key={SECRET_VALUE}\n")),
            "{body}"
        );
    }
    use rustls::HandshakeKind::{Full, Resumed};
    assert_eq!(kinds, [Some(Full), Some(Resumed)]);
    let audit = w.audit(2).await;
    assert!(audit
        .iter()
        .all(|e| e.mode == Mode::Intercept && e.secrets == ["TOKEN"]));
}

#[tokio::test]
async fn a_restarted_proxy_keeps_the_ca_and_the_placeholders() {
    let (w, port) = https_world(API, true).await;
    let carriers = (None, &["x-api-key"][..]);
    let ph = w.set_secret_in("TOKEN", &[&format!("{API}:{port}")], carriers, allow(port));
    let ca_before = w.proxy.ca().unwrap().cert_pem().to_owned();
    let World {
        tmp,
        test_ca,
        proxy,
        audit_path,
        ca_dir,
        store,
        ..
    } = w;
    proxy.shutdown().await;
    let cfg = airlock_proxy::ProxyConfig {
        policy: allow(port),
        hosts: [(API.to_owned(), "127.0.0.1".parse().unwrap())].into(),
        extra_roots: vec![tmp.path().join("test-ca.pem")],
        bindings: airlock_secrets::SecretStore::open(&tmp.path().join("data"))
            .unwrap()
            .bindings()
            .unwrap(),
        audit_path,
        audit_rotation: airlock_proxy::Rotation::default(),
        ca_dir,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy =
        airlock_proxy::Proxy::start(cfg, airlock_proxy::ProxyListener::Tcp(listener)).unwrap();
    assert_eq!(proxy.ca().unwrap().cert_pem(), ca_before);
    let addr = proxy.local_tcp_addr().unwrap();
    let r = https_via(
        addr,
        &format!("{API}:{port}"),
        API,
        client_tls(&[&ca_before]),
        "/",
        &[("x-api-key", &ph)],
    )
    .await
    .unwrap();
    assert!(
        r.answer
            .body
            .contains(&format!("h:x-api-key={SECRET_VALUE}\n")),
        "{}",
        r.answer.body
    );
    drop((test_ca, store));
}

/// A GET of `path` carrying `key` in `x-api-key` over an open HTTP/1 connection: the status and
/// the body as text.
async fn get_with_key(
    sender: &mut hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
    host: &str,
    path: &str,
    key: &str,
) -> (hyper::StatusCode, String) {
    let req = hyper::Request::get(path)
        .header("host", host)
        .header("x-api-key", key)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}
