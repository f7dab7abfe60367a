//! The egress path end to end (PRODUCT N1–N10, issue 5): real sandboxes, the real proxy child,
//! and servers on the host's loopback that the tests start, HTTPS ones with their own test CA.
//!
//! Upstreams listen on 127.0.0.1 under test names (`web.test`, `secure.test`) that the user
//! config maps with `[network.hosts]` and allows with exact `name:port` rules — the mechanism a
//! user has (N3); nothing here loosens a check. The preset is `none`, so anything not named is
//! denied.

mod builds;
mod debian_image;
mod handoff;
pub mod live;
mod packages;
mod proxy;
mod tools;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The value every secret test stores; asserted absent from the sandbox and airlock's files.
pub const SECRET_VALUE: &str = "tok_live_Zq9W8e7R6t5Y_never_inside";

/// The body of every non-file answer.
pub const GREETING: &str = "hello from the test server\n";

/// What a test server saw: each request's head (request line and headers), in order.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    pub fn all(&self) -> String {
        self.0.lock().unwrap().join("\n----\n")
    }
}

/// A server on the host's loopback.
pub struct Server {
    pub addr: SocketAddr,
    pub seen: Seen,
}

impl Server {
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// A CA the tests create, like a private company CA; its PEM is written to `pem_path`.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    pub pem_path: PathBuf,
}

impl TestCa {
    pub fn new(dir: &Path) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            "airlock network-test upstream CA",
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let pem_path = dir.join("test-upstream-ca.pem");
        std::fs::write(&pem_path, cert.pem()).unwrap();
        TestCa {
            cert,
            key,
            pem_path,
        }
    }

    fn server_config(&self, name: &str) -> Arc<rustls::ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .unwrap();
        Arc::new(cfg)
    }
}

/// A plain HTTP server: files under `root` by path (query ignored), else a fixed greeting. The
/// request heads are recorded, never reflected (a reflected credential would reach the sandbox).
pub fn http_server(root: Option<PathBuf>) -> Server {
    serve(None, root)
}

/// An HTTPS server presenting a certificate for `name` signed by `ca`, serving like
/// [`http_server`].
pub fn https_server(ca: &TestCa, name: &str, root: Option<PathBuf>) -> Server {
    serve(Some(ca.server_config(name)), root)
}

fn serve(tls: Option<Arc<rustls::ServerConfig>>, root: Option<PathBuf>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let record = seen.clone();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (tls, root, record) = (tls.clone(), root.clone(), record.clone());
            thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(20)));
                match tls {
                    Some(cfg) => {
                        let Ok(server) = rustls::ServerConnection::new(cfg) else {
                            return;
                        };
                        let stream = rustls::StreamOwned::new(server, conn);
                        answer(stream, root.as_deref(), &record);
                    }
                    None => answer(conn, root.as_deref(), &record),
                }
            });
        }
    });
    Server { addr, seen }
}

/// Serves requests on one connection until the client closes it.
fn answer<S: Read + Write>(mut stream: S, root: Option<&Path>, seen: &Seen) {
    loop {
        let Some(head) = read_head(&mut stream) else {
            return;
        };
        seen.0.lock().unwrap().push(head.clone());
        let path = head
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .split('?')
            .next()
            .unwrap_or("/")
            .to_owned();
        let mut file = path.trim_start_matches('/').to_owned();
        if file.is_empty() || file.ends_with('/') {
            file.push_str("index.html");
        }
        let (status, body) = match root {
            Some(root) => match std::fs::read(root.join(&file)) {
                Ok(bytes) => ("200 OK", bytes),
                Err(_) => ("404 Not Found", b"not found\n".to_vec()),
            },
            None => ("200 OK", GREETING.as_bytes().to_vec()),
        };
        let kind = if file.ends_with(".html") {
            "text/html"
        } else {
            "application/octet-stream"
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: {kind}\r\n\r\n",
            body.len()
        );
        if stream.write_all(reply.as_bytes()).is_err()
            || stream.write_all(&body).is_err()
            || stream.flush().is_err()
        {
            return;
        }
    }
}

fn read_head<S: Read>(stream: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
        if head.len() > 64 * 1024 {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The user config of a network test: preset `none`, the given exact allow rules, every test
/// name mapped to 127.0.0.1, the test CA trusted for upstream verification, plus `extra`.
pub fn user_config(allow: &[String], ca: Option<&TestCa>, extra: &str) -> String {
    let allow: Vec<String> = allow.iter().map(|a| format!("{a:?}")).collect();
    let ca = ca
        .map(|c| format!("extra_ca = [{:?}]\n", c.pem_path.display().to_string()))
        .unwrap_or_default();
    format!(
        "[network]\npreset = \"none\"\nallow = [{}]\n{ca}\n[network.hosts]\n\"web.test\" = \"127.0.0.1\"\n\"secure.test\" = \"127.0.0.1\"\n\"other.test\" = \"127.0.0.1\"\n{extra}",
        allow.join(", ")
    )
}

/// Whether something accepts on the host's `127.0.0.1:port`.
pub fn host_listens(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Every file under `root` (not following links) whose bytes contain `needle`.
pub fn files_containing(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_file() {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    hits.push(path);
                }
            }
        }
    }
    hits
}
