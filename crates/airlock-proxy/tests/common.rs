//! Harness: a test CA, echo servers (HTTP and HTTPS), a proxy on loopback TCP, and clients
//! that speak to it the way curl does (absolute-form HTTP, CONNECT then TLS).
//!
//! Upstreams listen on 127.0.0.1 under names mapped by the proxy's static hosts table; they
//! are reachable only because each test adds an exact user rule naming `name:port` — the same
//! mechanism a user has (N3). Nothing here loosens a check.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use airlock_config::policy::{Action, HostPattern, Policy, Rule, RuleOrigin};
use airlock_config::raw::Preset;
use airlock_proxy::{AuditEntry, Proxy, ProxyConfig, ProxyHandle, ProxyListener};
use airlock_secrets::{Redacted, SecretBindings, SecretStore};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The value every test stores; asserted absent from every log.
pub const SECRET_VALUE: &str = "tok_live_S3CRET_never_printed_42";

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA the tests create, like a private company CA.
pub struct TestCa {
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "airlock test upstream CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        TestCa { cert, key }
    }

    /// A server config for `name` signed by this CA.
    pub fn server_config(&self, name: &str) -> Arc<rustls::ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .unwrap();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}

/// Echoes the request: `uri=…`, one `h:name=value` line per header, then `body=…`.
async fn echo(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let mut out = format!("uri={}\n", req.uri());
    for (k, v) in req.headers() {
        out.push_str(&format!(
            "h:{k}={}\n",
            String::from_utf8_lossy(v.as_bytes())
        ));
    }
    let body = req.into_body().collect().await?.to_bytes();
    out.push_str(&format!("body={}\n", String::from_utf8_lossy(&body)));
    Ok(Response::builder()
        .header("x-upstream", "echo")
        .body(Full::new(Bytes::from(out)))
        .unwrap())
}

/// An HTTP echo server on 127.0.0.1.
pub async fn http_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(echo);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

/// An HTTPS echo server on 127.0.0.1 presenting a `name` certificate from `ca`.
pub async fn https_echo(ca: &TestCa, name: &str) -> SocketAddr {
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config(name));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(echo);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

pub fn rule(action: Action, pattern: &str) -> Rule {
    Rule {
        action,
        pattern: HostPattern::parse(pattern).unwrap(),
        origin: RuleOrigin::User,
    }
}

pub fn policy(rules: Vec<Rule>) -> Policy {
    Policy::new(Preset::None, rules)
}

/// A proxy whose hosts table maps `name` to an HTTP echo server on loopback, and whose policy
/// allows exactly `name:port`. Returns the world and the echo's port.
pub async fn http_world(name: &'static str) -> (World, u16) {
    let port = http_echo().await.port();
    let setup = Setup {
        policy: policy(vec![rule(Action::Allow, &format!("{name}:{port}"))]),
        hosts: vec![(name, "127.0.0.1")],
        trust_test_ca: false,
        audit_rotation: Default::default(),
    };
    (World::start(setup, TestCa::new()).await, port)
}

/// A proxy whose hosts table maps `name` to an HTTPS echo server presenting a `name`
/// certificate from the world's test CA, and whose policy allows exactly `name:port`; the CA
/// is trusted upstream when `trust_test_ca`. Returns the world and the echo's port.
pub async fn https_world(name: &'static str, trust_test_ca: bool) -> (World, u16) {
    https_world_with(name, trust_test_ca, None).await
}

/// [`https_world`], with `system_roots` instead of the host's trust store when given.
pub async fn https_world_with(
    name: &'static str,
    trust_test_ca: bool,
    system_roots: Option<airlock_proxy::tls::SystemRoots>,
) -> (World, u16) {
    let ca = TestCa::new();
    let port = https_echo(&ca, name).await.port();
    let setup = Setup {
        policy: policy(vec![rule(Action::Allow, &format!("{name}:{port}"))]),
        hosts: vec![(name, "127.0.0.1")],
        trust_test_ca,
        audit_rotation: Default::default(),
    };
    (World::start_with(setup, ca, system_roots).await, port)
}

/// A running proxy with its files.
pub struct World {
    pub tmp: tempfile::TempDir,
    pub test_ca: TestCa,
    pub proxy: ProxyHandle,
    pub addr: SocketAddr,
    pub audit_path: PathBuf,
    pub ca_dir: PathBuf,
    pub store: SecretStore,
}

pub struct Setup {
    pub policy: Policy,
    pub hosts: Vec<(&'static str, &'static str)>,
    pub trust_test_ca: bool,
    pub audit_rotation: airlock_proxy::Rotation,
}

impl World {
    pub async fn start(setup: Setup, test_ca: TestCa) -> World {
        World::start_with(setup, test_ca, None).await
    }

    /// [`World::start`], with `system_roots` instead of the host's trust store when given.
    pub async fn start_with(
        setup: Setup,
        test_ca: TestCa,
        system_roots: Option<airlock_proxy::tls::SystemRoots>,
    ) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let ca_file = tmp.path().join("test-ca.pem");
        std::fs::write(&ca_file, test_ca.cert.pem()).unwrap();
        let store = SecretStore::open(&tmp.path().join("data")).unwrap();
        let audit_path = tmp.path().join("state/sandbox/audit.jsonl");
        let ca_dir = tmp.path().join("data/ca");
        let hosts: BTreeMap<_, _> = setup
            .hosts
            .iter()
            .map(|(h, ip)| (h.to_string(), ip.parse().unwrap()))
            .collect();
        let cfg = ProxyConfig {
            policy: setup.policy,
            hosts,
            extra_roots: if setup.trust_test_ca {
                vec![ca_file]
            } else {
                vec![]
            },
            bindings: store.bindings().unwrap(),
            audit_path: audit_path.clone(),
            audit_rotation: setup.audit_rotation,
            ca_dir: ca_dir.clone(),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = match system_roots {
            None => Proxy::start(cfg, ProxyListener::Tcp(listener)).unwrap(),
            Some(system) => {
                let trust =
                    airlock_proxy::tls::UpstreamTrust::with_system(system, &cfg.extra_roots)
                        .unwrap();
                Proxy::start_with_trust(cfg, ProxyListener::Tcp(listener), trust).unwrap()
            }
        };
        let addr = proxy.local_tcp_addr().unwrap();
        World {
            tmp,
            test_ca,
            proxy,
            addr,
            audit_path,
            ca_dir,
            store,
        }
    }

    /// One request for `path` to `name:port` through CONNECT and TLS, trusting only the proxy's
    /// interception CA, as a sandbox does.
    pub async fn https_intercepted(
        &self,
        name: &str,
        port: u16,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<HttpsAnswer, String> {
        let airlock_ca = self.proxy.ca().unwrap().cert_pem().to_owned();
        let roots = client_tls(&[&airlock_ca]);
        https_via(
            self.addr,
            &format!("{name}:{port}"),
            name,
            roots,
            path,
            headers,
        )
        .await
    }

    /// Stores a secret and pushes the new bindings to the running proxy.
    pub fn set_secret(
        &self,
        name: &str,
        hosts: &[&str],
        header: Option<&str>,
        policy: Policy,
    ) -> String {
        self.set_secret_in(name, hosts, (header, &[]), policy)
    }

    /// [`World::set_secret`], naming `carriers`: further headers the value may be carried in.
    pub fn set_secret_in(
        &self,
        name: &str,
        hosts: &[&str],
        (header, carriers): (Option<&str>, &[&str]),
        policy: Policy,
    ) -> String {
        let hosts: Vec<_> = hosts
            .iter()
            .map(|h| HostPattern::parse(h).unwrap())
            .collect();
        let value = Redacted::new(SECRET_VALUE.to_owned());
        let info = self
            .store
            .set_with_headers(name, &hosts, header, carriers, value)
            .unwrap();
        self.proxy.update(policy, self.bindings());
        info.placeholder
    }

    pub fn bindings(&self) -> SecretBindings {
        self.store.bindings().unwrap()
    }

    /// Audit entries, waiting briefly for the line of a request that just finished.
    pub async fn audit(&self, at_least: usize) -> Vec<AuditEntry> {
        for _ in 0..100 {
            let entries = airlock_proxy::read_entries(&self.audit_path).unwrap();
            if entries.len() >= at_least {
                return entries;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("fewer than {at_least} audit entries");
    }

    /// Every file airlock wrote except the secret store, as text.
    pub fn files_outside_the_store(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        let mut stack = vec![self.tmp.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p == self.store.dir() {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((
                        p.clone(),
                        String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned(),
                    ));
                }
            }
        }
        out
    }
}

/// A parsed response.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn policy_header(&self) -> String {
        self.headers
            .get(airlock_proxy::POLICY_HEADER)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

async fn send<T>(io: T, req: Request<Full<Bytes>>) -> Answer
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A plain-HTTP proxy request (absolute-form), like `curl -x`.
pub async fn http_via(
    proxy: SocketAddr,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut b = Request::builder()
        .method(if body.is_empty() { "GET" } else { "POST" })
        .uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    send(TcpStream::connect(proxy).await.unwrap(), req).await
}

/// Sends `CONNECT authority`; returns the answer head and, on 200, the open stream.
pub async fn connect(proxy: SocketAddr, authority: &str) -> (Answer, Option<TcpStream>) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let status: u16 = text.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = hyper::HeaderMap::new();
    let mut length = 0usize;
    for line in text.lines().skip(1).filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once(':').unwrap();
        if k.eq_ignore_ascii_case("content-length") {
            length = v.trim().parse().unwrap();
        }
        headers.append(
            hyper::header::HeaderName::from_bytes(k.trim().as_bytes()).unwrap(),
            v.trim().parse().unwrap(),
        );
    }
    if status != 200 {
        let mut body = vec![0u8; length];
        s.read_exact(&mut body).await.unwrap();
        let answer = Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        return (answer, None);
    }
    (
        Answer {
            status,
            headers,
            body: String::new(),
        },
        Some(s),
    )
}

/// A client TLS config trusting exactly `roots_pem`.
pub fn client_tls(roots_pem: &[&str]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in roots_pem {
        for cert in rustls_pemfile_certs(pem) {
            roots.add(cert).unwrap();
        }
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

fn rustls_pemfile_certs(pem: &str) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.unwrap())
        .collect()
}

/// The outcome of an HTTPS request through CONNECT.
pub struct HttpsAnswer {
    pub answer: Answer,
    /// The certificate the client saw (DER).
    pub peer: Vec<u8>,
}

/// `CONNECT authority`, TLS with `sni` trusting `roots`, then one request for `path`.
pub async fn https_via(
    proxy: SocketAddr,
    authority: &str,
    sni: &str,
    roots: Arc<rustls::ClientConfig>,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<HttpsAnswer, String> {
    let (answer, stream) = connect(proxy, authority).await;
    let stream = stream.ok_or_else(|| format!("CONNECT answered {}", answer.status))?;
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(roots)
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let mut b = Request::builder()
        .uri(path)
        .header("host", authority.trim_end_matches(":443"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::new())).unwrap();
    Ok(HttpsAnswer {
        answer: send(tls, req).await,
        peer,
    })
}

/// Whether the DER certificate's bytes contain `text` (subject/issuer names are plain ASCII).
pub fn der_contains(der: &[u8], text: &str) -> bool {
    der.windows(text.len()).any(|w| w == text.as_bytes())
}
