//! Wiring the egress proxy into sandboxes (PRODUCT N1, N5, N6, N8, N10).
//!
//! Shape, per sandbox (persistent through the keeper, or ephemeral through `run`):
//! - a private host directory (0700), bound read-only at `/run/airlock` inside by the linux
//!   backend ([`airlock_linux::spec::Egress`]), holds `proxy.sock` (the egress proxy),
//!   `port-N.sock` (one connector per `[[network.host_port]]`, N10), `ca.crt` (the public
//!   certificate of the per-installation interception CA) and `ca-bundle.crt` (the host's
//!   system bundle plus that certificate, also bound over the image's system bundle); both
//!   are hard links to checked per-user copies in `<runtime>/egress-trust` when possible;
//! - the guest's PID 1 relays `127.0.0.1:3128` (and each host port's guest port) to those
//!   sockets; the network namespace has loopback only, so nothing else leaves (I9);
//! - the proxy and the connectors run in a child process, `airlock __proxy` ([`child`]),
//!   supervised by its owner ([`supervisor`]): when it dies the sockets refuse and the sandbox
//!   is offline until it is back, with the policy and secrets in force at that moment.
//!
//! Order in a start: [`attach`] (spec: environment and relays, before anything exists) →
//! [`materialize`] (directory, CA, bundle) → spawn the child and wait for `ready` → start the
//! sandbox. Invariants: the CA private key and secret values never enter the directory, the
//! spec or the child's command line; the sandbox sees placeholders only (N8).

pub mod check;
pub mod child;
pub mod lazy;
pub mod on_demand;
pub mod reload;
pub mod supervisor;
mod system_bundle;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use airlock_config::effective::Network;
use airlock_config::{env_vars, Roots};
use airlock_linux::spec::{Egress, Relay, SandboxSpec, EGRESS_DIR};

use crate::error::{ErrorKind, HostError};

pub use crate::paths::{ca_dir, port_socket, CA_BUNDLE, CA_CERT, PROXY_SOCKET};
pub use airlock_config::env_vars::PROXY_PORT;

/// Adds the egress part to `spec`: the proxy variables (N1), the CA bundle variables (N6), one
/// placeholder per secret (N5) and the relays (N1, N10). `spec.egress.host_dir` is left empty:
/// the owner of the sandbox's runtime directory fills it in.
pub fn attach(
    spec: &mut SandboxSpec,
    network: &Network,
    data_root: &Path,
) -> Result<(), HostError> {
    let mut relays = vec![Relay {
        port: PROXY_PORT,
        socket: PROXY_SOCKET.to_owned(),
        handoff: true,
    }];
    for hp in &network.host_ports {
        if relays.iter().any(|r| r.port == hp.guest_port) {
            return Err(HostError::new(
                ErrorKind::Config,
                "network.host_port_conflict",
                format!(
                    "the sandbox port {} is used twice (3128 is the proxy's)",
                    hp.guest_port
                ),
            )
            .with_hint("give each [[network.host_port]] its own guest_port"));
        }
        relays.push(Relay {
            port: hp.guest_port,
            socket: port_socket(hp.port),
            handoff: false,
        });
    }
    spec.env.extend(environment(data_root)?);
    spec.egress = Some(Egress {
        host_dir: PathBuf::new(),
        relays,
        trust_bundle: Some(CA_BUNDLE.to_owned()),
    });
    Ok(())
}

/// The variables every sandbox process gets for the egress path.
fn environment(data_root: &Path) -> Result<Vec<(String, String)>, HostError> {
    let inside = |f: &str| format!("{EGRESS_DIR}/{f}");
    let mut env: Vec<(String, String)> = env_vars::PROXY_VARS
        .iter()
        .map(|k| ((*k).to_owned(), env_vars::PROXY_URL.to_owned()))
        .collect();
    for k in [env_vars::NO_PROXY, env_vars::NO_PROXY_LOWER] {
        env.push((k.to_owned(), env_vars::NO_PROXY_VALUE.to_owned()));
    }
    for k in env_vars::CA_BUNDLE_VARS {
        // Node adds NODE_EXTRA_CA_CERTS to its own roots: the CA alone is what it wants.
        let file = if *k == env_vars::NODE_EXTRA_CA_CERTS {
            CA_CERT
        } else {
            CA_BUNDLE
        };
        env.push(((*k).to_owned(), inside(file)));
    }
    env.extend(placeholders(data_root)?);
    Ok(env)
}

/// `(NAME, placeholder)` for every stored secret; values are never read here.
fn placeholders(data_root: &Path) -> Result<Vec<(String, String)>, HostError> {
    if !data_root.join("secrets").exists() {
        return Ok(Vec::new());
    }
    let store = airlock_secrets::SecretStore::open(data_root).map_err(secret_error)?;
    let infos = store.list().map_err(secret_error)?;
    Ok(infos.into_iter().map(|i| (i.name, i.placeholder)).collect())
}

/// Adds the placeholder of every secret stored now that `env` does not set already, so a secret
/// added after the sandbox started reaches the processes started after that. Values are never
/// read; a store that cannot be listed adds nothing.
pub fn add_current_placeholders(
    data_root: &Path,
    env: &mut std::collections::BTreeMap<String, String>,
) {
    for (name, placeholder) in placeholders(data_root).unwrap_or_default() {
        env.entry(name).or_insert(placeholder);
    }
}

fn secret_error(e: airlock_secrets::SecretError) -> HostError {
    HostError::new(ErrorKind::Failed, "secret.store", e.to_string())
        .with_hint("check the secret store with `airlock secret ls`")
}

/// Per-user copies of the public trust files, in the runtime root, hard-linked into each egress
/// directory: a run then allocates no inode and copies no 200 KiB bundle for them (on a
/// disk-backed runtime root each new inode cost ~0.1 ms under churn, B3).
const TRUST_CACHE: &str = "egress-trust";

/// Creates the egress directory (0700) and places the CA certificate and bundle in it. The CA
/// is created on first use under [`ca_dir`]; only its public certificate is copied.
///
/// Both files are hard links to complete, validated copies in [`TRUST_CACHE`] (keyed by the
/// system bundle's identity and checked against the CA certificate before use), or written
/// directly when that is impossible (another filesystem, an unwritable cache).
pub fn materialize(dir: &Path, roots: &Roots, image_root: &Path) -> Result<(), HostError> {
    let fail = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        HostError::new(
            ErrorKind::Failed,
            "egress.prepare",
            format!("cannot {what} {}: {e}", path.display()),
        )
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| fail("create", dir, &e))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| fail("protect", dir, &e))?;
    let ca_root = ca_dir(&roots.data);
    crate::paths::ensure_root(roots, &ca_root)?;
    let ca_pem = airlock_proxy::CertificateAuthority::public_cert_pem(&ca_root)
        .map_err(|e| fail("load the interception CA in", &ca_root, &e))?;
    let ca_pem = ca_pem.as_bytes();
    let cache = roots.runtime.join(TRUST_CACHE);
    let cache = crate::paths::ensure_root(roots, &cache)
        .is_ok()
        .then_some(cache);
    let system = system_bundle::SystemBundle::open(image_root);
    let path = dir.join(CA_CERT);
    place(
        &path,
        cache.as_ref().map(|c| c.join(CA_CERT)),
        |f| fs::read(f).is_ok_and(|b| b == ca_pem),
        || Ok(ca_pem.to_vec()),
    )
    .map_err(|e| fail("write", &path, &e))?;
    let path = dir.join(CA_BUNDLE);
    place(
        &path,
        cache.as_ref().map(|c| c.join(bundle_key(system.as_ref()))),
        |f| bundle_matches(f, system.as_ref(), ca_pem),
        || {
            let mut bundle = system.as_ref().map(|s| s.read()).unwrap_or_default();
            if !bundle.is_empty() && !bundle.ends_with(b"\n") {
                bundle.push(b'\n');
            }
            bundle.extend_from_slice(ca_pem);
            Ok(bundle)
        },
    )
    .map_err(|e| fail("write", &path, &e))
}

/// The cache name of the bundle built from `system`: its identity (device, inode, size,
/// modification and change times), so an updated system bundle gets a fresh copy.
fn bundle_key(system: Option<&system_bundle::SystemBundle>) -> String {
    use std::os::unix::fs::MetadataExt;
    match system.map(|s| &s.meta) {
        Some(m) => format!(
            "bundle-{}-{}-{}-{}.{}-{}.{}.crt",
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        ),
        None => "bundle-none.crt".to_owned(),
    }
}

/// Whether `file` is a complete bundle of `system` (as it is now) and `ca_pem`: its length is
/// the system bundle's (plus a separating newline) plus the certificate's, and it ends with
/// the certificate.
fn bundle_matches(
    file: &Path,
    system: Option<&system_bundle::SystemBundle>,
    ca_pem: &[u8],
) -> bool {
    use std::os::unix::fs::FileExt;
    let system_len = system.map_or(0, |s| s.meta.len());
    let Ok(f) = fs::File::open(file) else {
        return false;
    };
    let Ok(len) = f.metadata().map(|m| m.len()) else {
        return false;
    };
    let ca_len = ca_pem.len() as u64;
    if len != system_len + ca_len && len != system_len + 1 + ca_len {
        return false;
    }
    let mut tail = vec![0u8; ca_pem.len()];
    f.read_exact_at(&mut tail, len - ca_len).is_ok() && tail == ca_pem
}

/// Places the public file `target`: a hard link to `cached` when that is (or can be made) a
/// valid copy, checked through the link itself (so a concurrent replacement of the cache entry
/// cannot slip an unchecked file in), else a fresh file with `content`.
fn place(
    target: &Path,
    cached: Option<PathBuf>,
    valid: impl Fn(&Path) -> bool,
    content: impl FnOnce() -> std::io::Result<Vec<u8>>,
) -> std::io::Result<()> {
    let Some(cached) = cached else {
        return write_public(target, &content()?);
    };
    let tmp = target.with_extension("tmp");
    let linked = |tmp: &Path| {
        let _ = fs::remove_file(tmp);
        fs::hard_link(&cached, tmp).is_ok() && valid(tmp)
    };
    if linked(&tmp) {
        return fs::rename(&tmp, target);
    }
    let bytes = content()?;
    let unique = cached.with_extension(format!("tmp.{}", std::process::id()));
    if write_public_at(&unique, &cached, &bytes).is_ok() && linked(&tmp) {
        return fs::rename(&tmp, target);
    }
    let _ = fs::remove_file(&tmp);
    write_public(target, &bytes)
}

/// Writes a public file (0644) in a fresh inode, so a sandbox holding the old one open reads a
/// consistent file. No fsync: the egress directory is in the runtime root (gone at reboot) and
/// is rewritten at every start, so durability buys nothing, while an fsync of the 200 KiB bundle
/// cost milliseconds per `airlock run` on a disk-backed runtime root (B3). The rename alone
/// keeps readers from ever seeing a partial file.
fn write_public(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_public_at(&path.with_extension("tmp"), path, bytes)
}

/// [`write_public`] through the temporary name `tmp`.
fn write_public_at(tmp: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let _ = fs::remove_file(tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(tmp)?;
    let done = f.write_all(bytes).and_then(|()| fs::rename(tmp, path));
    if done.is_err() {
        let _ = fs::remove_file(tmp);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        use airlock_linux::spec::HostUser;
        let user = HostUser {
            uid: 1,
            gid: 1,
            name: "u".into(),
            home: "/home/u".into(),
        };
        SandboxSpec::bare("t", user)
    }

    fn network(ports: &[(u16, u16)]) -> Network {
        use airlock_config::effective::{HostPort, Origin, Sourced};
        Network {
            preset: Sourced::new(airlock_config::raw::Preset::Dev, Origin::Default),
            rules: vec![],
            agent_hosts: vec![],
            ignored: vec![],
            hosts: vec![],
            host_ports: ports
                .iter()
                .map(|&(port, guest_port)| HostPort { port, guest_port })
                .collect(),
            extra_ca: vec![],
        }
    }

    #[test]
    fn every_process_gets_the_proxy_and_ca_variables() {
        let data = tempfile::tempdir().unwrap();
        let mut spec = spec();
        attach(&mut spec, &network(&[]), data.path()).unwrap();
        let get = |k: &str| {
            spec.env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            assert_eq!(get(k).as_deref(), Some("http://127.0.0.1:3128"), "{k}");
        }
        assert_eq!(get("NO_PROXY").as_deref(), Some("localhost,127.0.0.1,::1"));
        for k in [
            "SSL_CERT_FILE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
            "CARGO_HTTP_CAINFO",
        ] {
            assert_eq!(get(k).as_deref(), Some("/run/airlock/ca-bundle.crt"), "{k}");
        }
        assert_eq!(
            get("NODE_EXTRA_CA_CERTS").as_deref(),
            Some("/run/airlock/ca.crt")
        );
    }

    #[test]
    fn host_ports_become_relays_and_may_not_take_the_proxy_port() {
        let data = tempfile::tempdir().unwrap();
        let mut s = spec();
        attach(&mut s, &network(&[(5432, 5433)]), data.path()).unwrap();
        let relays = &s.egress.as_ref().unwrap().relays;
        assert_eq!(relays.len(), 2);
        assert_eq!(relays[1].port, 5433);
        assert_eq!(relays[1].socket, "port-5432.sock");
        let mut s = spec();
        assert!(attach(&mut s, &network(&[(8080, 3128)]), data.path()).is_err());
    }

    /// A home with airlock's roots and an image whose system bundle is `SYSTEM ROOTS\n`:
    /// `(home, roots, image, the system bundle's path)`.
    fn trust_fixture() -> (tempfile::TempDir, Roots, tempfile::TempDir, PathBuf) {
        let home = tempfile::tempdir().unwrap();
        // Everything below the throw-away home, the runtime root included.
        let roots =
            Roots::from_env_with(|k| (k == "HOME").then(|| home.path().into()), || None).unwrap();
        let image = tempfile::tempdir().unwrap();
        let certs = image.path().join("etc/ssl/certs");
        fs::create_dir_all(&certs).unwrap();
        let system = certs.join("ca-certificates.crt");
        fs::write(&system, "SYSTEM ROOTS\n").unwrap();
        (home, roots, image, system)
    }

    #[test]
    fn the_bundle_holds_the_ca_certificate_and_never_its_key() {
        let (home, roots, image, _) = trust_fixture();
        let dir = home.path().join("egress");
        materialize(&dir, &roots, image.path()).unwrap();
        let bundle = fs::read_to_string(dir.join(CA_BUNDLE)).unwrap();
        let ca = fs::read_to_string(dir.join(CA_CERT)).unwrap();
        assert!(bundle.starts_with("SYSTEM ROOTS\n"));
        assert!(bundle.ends_with(&ca));
        for entry in fs::read_dir(&dir).unwrap() {
            let text = fs::read_to_string(entry.unwrap().path()).unwrap();
            assert!(
                !text.contains("PRIVATE KEY"),
                "a private key in the egress dir"
            );
        }
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    fn inode(p: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(p).unwrap().ino()
    }

    #[test]
    fn sandboxes_share_one_checked_copy_of_the_bundle_and_an_update_gets_a_fresh_one() {
        let (home, roots, image, system) = trust_fixture();
        let (a, b, c) = (
            home.path().join("a"),
            home.path().join("b"),
            home.path().join("c"),
        );
        materialize(&a, &roots, image.path()).unwrap();
        materialize(&b, &roots, image.path()).unwrap();
        for f in [CA_CERT, CA_BUNDLE] {
            assert_eq!(
                inode(&a.join(f)),
                inode(&b.join(f)),
                "{f} is one shared copy"
            );
        }
        let ca = fs::read_to_string(a.join(CA_CERT)).unwrap();
        // An update of the system bundle (a new file, as dpkg writes it) reaches the next
        // sandbox; the running one keeps its consistent copy.
        let tmp = system.with_file_name("new");
        fs::write(&tmp, "UPDATED ROOTS").unwrap();
        fs::rename(&tmp, &system).unwrap();
        materialize(&c, &roots, image.path()).unwrap();
        let fresh = fs::read_to_string(c.join(CA_BUNDLE)).unwrap();
        assert_eq!(fresh, format!("UPDATED ROOTS\n{ca}"));
        let old = fs::read_to_string(a.join(CA_BUNDLE)).unwrap();
        assert_eq!(old, format!("SYSTEM ROOTS\n{ca}"));
    }

    #[test]
    fn a_damaged_cached_copy_is_never_handed_to_a_sandbox() {
        let (home, roots, image, _) = trust_fixture();
        let a = home.path().join("a");
        materialize(&a, &roots, image.path()).unwrap();
        let ca = fs::read_to_string(a.join(CA_CERT)).unwrap();
        let cache = roots.runtime.join(TRUST_CACHE);
        for entry in fs::read_dir(&cache).unwrap() {
            let path = entry.unwrap().path();
            // A fresh inode, as a crash or another writer would leave it: truncated.
            fs::remove_file(&path).unwrap();
            fs::write(&path, "SYSTEM RO").unwrap();
        }
        let b = home.path().join("b");
        materialize(&b, &roots, image.path()).unwrap();
        assert_eq!(fs::read_to_string(b.join(CA_CERT)).unwrap(), ca);
        assert_eq!(
            fs::read_to_string(b.join(CA_BUNDLE)).unwrap(),
            format!("SYSTEM ROOTS\n{ca}")
        );
    }
}
