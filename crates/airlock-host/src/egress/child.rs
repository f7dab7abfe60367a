//! `airlock __proxy <egress dir>`: the egress proxy and the host-port connectors of one sandbox.
//!
//! Protocol with the owner (the keeper or `run`), one line each way, versioned
//! (`airlock_protocol::host`); every answer is one JSON [`ProxyAnswer`]:
//! 1. stdin, first line: the [`EgressStart`] JSON (no secret in it); one of another host
//!    protocol version is refused;
//! 2. the child resolves the roots from it, loads the *current* network configuration and
//!    secrets (so a restart comes back with what is in force now), binds `proxy.sock` and one
//!    `port-N.sock` per `[[network.host_port]]`, and answers `ready` (or `error` and exits).
//!    Sockets the owner bound already (socket activation, [`super::lazy`]) are not bound
//!    again: they arrive as descriptors 3, 4, … ([`FIRST_LISTENER_FD`]), named in that order
//!    by the arguments after the egress directory (`__proxy <dir> proxy.sock port-N.sock`);
//! 3. each further stdin line `reload` reloads policy and secrets and answers `ok` or
//!    `error` (the previous policy stays in force on error); when what only a start can
//!    apply changed (`[network.hosts]`, `extra_ca`, host ports), it answers `ok` and exits, so
//!    its supervisor starts a fresh one with everything current;
//! 4. EOF on stdin (the owner is gone or done) stops everything; so does the owner's death
//!    (`PR_SET_PDEATHSIG`).
//!
//! Everything runs on one current-thread tokio runtime, stdin included (read through the
//! reactor as a non-blocking pipe): a start spawns no thread, which every `airlock run` pays
//! for (B3). A reload's configuration read and the first upstream TLS connection's trust-store
//! build briefly hold that thread; both are milliseconds.
//!
//! A host-port connector connects only to `127.0.0.1:<that port>` (N10); nothing else on the
//! host is reachable through it.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use airlock_config::effective::Network;
use airlock_config::Roots;
use airlock_proxy::{Proxy, ProxyConfig, ProxyHandle, ProxyListener};
use airlock_secrets::{SecretBindings, SecretStore};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpStream, UnixListener};

use super::{ca_dir, port_socket, PROXY_SOCKET};
use crate::lifecycle::backend::with_socket_path;
use crate::wire::{EgressStart, ProxyAnswer, PROXY_RELOAD};

/// The descriptor of the first listener the owner passes (see the module docs).
pub const FIRST_LISTENER_FD: std::os::fd::RawFd = 3;

/// Entry point of the hidden verb (`args`: the whole argv); returns the exit status.
pub fn main(args: &[OsString]) -> i32 {
    let inherited = match Inherited::take(args.get(3..).unwrap_or_default()) {
        Ok(inherited) => inherited,
        Err(e) => return answer_fatal(&format!("bad inherited listener: {e}")),
    };
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // One thread: the proxy of one sandbox serves one agent's connections, tunnels splice in
    // the kernel, and a start spawns no worker threads (B3: every `run` pays this start).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return answer_fatal(&format!("cannot start the proxy runtime: {e}")),
    };
    runtime.block_on(run(inherited))
}

/// Listeners the owner bound and passed (socket activation), by socket file name.
struct Inherited(Vec<(String, std::os::unix::net::UnixListener)>);

impl Inherited {
    /// Claims descriptors 3, 4, … for `names` (each must be a listening Unix socket).
    fn take(names: &[OsString]) -> std::io::Result<Inherited> {
        let mut out = Vec::new();
        for (name, fd) in names.iter().zip(FIRST_LISTENER_FD..) {
            let name = name
                .to_str()
                .filter(|n| !n.contains('/') && n.ends_with(".sock"))
                .ok_or_else(|| std::io::Error::other(format!("{name:?}")))?;
            if out.iter().any(|(n, _)| n == name) {
                return Err(std::io::Error::other(format!("{name} passed twice")));
            }
            // Claimed once per number, placed by the owner before exec (descriptors the
            // owner did not place are close-on-exec, so the number is ours or closed).
            let fd = airlock_linux::sys::fd::take_inherited(fd);
            let listener = std::os::unix::net::UnixListener::from(fd);
            listener.local_addr()?;
            listener.set_nonblocking(true)?;
            out.push((name.to_owned(), listener));
        }
        Ok(Inherited(out))
    }

    /// The listener for `name`: the inherited one, else a fresh socket bound in `dir`.
    fn listener(&mut self, dir: &Path, name: &str) -> Result<UnixListener, ChildError> {
        match self.0.iter().position(|(n, _)| n == name) {
            Some(i) => {
                let (_, l) = self.0.swap_remove(i);
                UnixListener::from_std(l).map_err(|source| ChildError::Listen {
                    path: dir.join(name),
                    source,
                })
            }
            None => bind(&dir.join(name)),
        }
    }
}

/// The protocol of the module docs, on the current-thread runtime.
async fn run(mut inherited: Inherited) -> i32 {
    let mut lines = match control_input() {
        Ok(input) => BufReader::new(input).lines(),
        Err(e) => return answer_fatal(&format!("stdin must be the owner's pipe: {e}")),
    };
    let start: EgressStart = match lines.next_line().await {
        Ok(Some(line)) => match crate::wire::decode(line.as_bytes()) {
            Ok(s) => s,
            Err(e) => return answer_fatal(&format!("bad start request: {e}")),
        },
        _ => return answer_fatal("no start request"),
    };
    let loaded = match Loaded::load(&start) {
        Ok(loaded) => loaded,
        Err(e) => return answer_fatal(&e.to_string()),
    };
    let fixed = loaded.fixed();
    let handle = match serve(&start, loaded, &mut inherited).await {
        Ok(handle) => handle,
        Err(e) => return answer_fatal(&e.to_string()),
    };
    if answer(&ProxyAnswer::Ready).is_err() {
        return 1;
    }
    // A persistent sandbox's proxy lives as long as the sandbox: after a while, give back the
    // binary's pages start-up mapped (a short `run` ends first and pays nothing for it).
    tokio::spawn(async {
        tokio::time::sleep(airlock_linux::sys::mem::IDLE_AFTER).await;
        airlock_linux::sys::mem::release_exe_pages();
    });
    while let Ok(Some(line)) = lines.next_line().await {
        let mut restart = false;
        let reply = match line.trim() {
            PROXY_RELOAD => match Loaded::load(&start) {
                Ok(l) => {
                    restart = fixed != l.fixed();
                    handle.update(l.network.policy(), l.bindings);
                    ProxyAnswer::Ok
                }
                Err(e) => ProxyAnswer::Error {
                    message: e.to_string(),
                },
            },
            other => ProxyAnswer::Error {
                message: format!("unknown request {other:?}"),
            },
        };
        if answer(&reply).is_err() || restart {
            break;
        }
    }
    handle.shutdown().await;
    0
}

/// The owner's requests: stdin, which the supervisor makes a pipe, read through the runtime's
/// reactor (no reader thread).
fn control_input() -> std::io::Result<tokio::net::unix::pipe::Receiver> {
    let fd = std::io::stdin().as_fd().try_clone_to_owned()?;
    tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
}

fn answer(answer: &ProxyAnswer) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(answer).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line)?;
    out.flush()
}

fn answer_fatal(message: &str) -> i32 {
    let _ = answer(&ProxyAnswer::Error {
        message: message.to_owned(),
    });
    1
}

/// Why the proxy child cannot start or reload; its text is what the owner reports.
#[derive(Debug, thiserror::Error)]
enum ChildError {
    #[error("{0}")]
    Roots(#[from] airlock_config::roots::RootsError),
    #[error("{0}")]
    Project(#[from] airlock_config::project::ProjectError),
    /// The network configuration in force does not load.
    #[error("{}", .0.message)]
    Config(crate::error::HostError),
    #[error("{0}")]
    Secrets(#[from] airlock_secrets::store::SecretError),
    #[error("{0}")]
    Proxy(#[from] airlock_proxy::server::ProxyError),
    #[error("cannot listen on {}: {source}", path.display())]
    Listen {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The configuration in force now.
struct Loaded {
    roots: Roots,
    network: Network,
    bindings: SecretBindings,
}

impl Loaded {
    /// What only a start applies: the static hosts, the upstream CAs, the host ports.
    fn fixed(&self) -> (Vec<(String, std::net::IpAddr)>, Vec<PathBuf>, Vec<u16>) {
        let n = &self.network;
        (
            n.hosts
                .iter()
                .map(|h| (h.name.clone(), h.address))
                .collect(),
            n.extra_ca.clone(),
            n.host_ports.iter().map(|p| p.port).collect(),
        )
    }

    fn load(start: &EgressStart) -> Result<Loaded, ChildError> {
        let lookup = |k: &str| {
            start
                .env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| OsString::from(v))
        };
        let roots = Roots::from_env(lookup)?;
        let project = match &start.project_root {
            // Exactly the sandbox's root, never an enclosing project (C7).
            Some(root) => Some(airlock_config::project::at_root(root)?),
            None => None,
        };
        let mut notes = Vec::new();
        let network = crate::config::current_network(&roots, project, &mut notes)
            .map_err(ChildError::Config)?;
        let bindings = if roots.data.join("secrets").exists() {
            SecretStore::open(&roots.data).and_then(|s| s.bindings())?
        } else {
            SecretBindings::empty()
        };
        Ok(Loaded {
            roots,
            network,
            bindings,
        })
    }
}

/// Binds the sockets and starts the proxy and the connectors on the current runtime.
async fn serve(
    start: &EgressStart,
    loaded: Loaded,
    inherited: &mut Inherited,
) -> Result<ProxyHandle, ChildError> {
    let listener = inherited.listener(&start.dir, PROXY_SOCKET)?;
    let cfg = ProxyConfig::from_network(
        &loaded.network,
        loaded.bindings,
        start.audit_path.clone(),
        ca_dir(&loaded.roots.data),
    );
    let handle = Proxy::start(cfg, ProxyListener::Unix(listener))?;
    for hp in &loaded.network.host_ports {
        let listener = inherited.listener(&start.dir, &port_socket(hp.port))?;
        tokio::spawn(connector(listener, hp.port));
    }
    Ok(handle)
}

/// Binds a fresh socket at `path` (a stale one from a dead predecessor is replaced), 0600.
fn bind(path: &Path) -> Result<UnixListener, ChildError> {
    let _ = std::fs::remove_file(path);
    let fail = |source: std::io::Error| ChildError::Listen {
        path: path.to_path_buf(),
        source,
    };
    let listener = with_socket_path(path, |p| UnixListener::bind(p)).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(listener)
}

/// Relays each connection on `listener` to the host's `127.0.0.1:port`, and nowhere else.
async fn connector(listener: UnixListener, port: u16) {
    loop {
        let Ok((mut inside, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        tokio::spawn(async move {
            let Ok(mut host) = TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).await
            else {
                return;
            };
            let _ = host.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inside, &mut host).await;
        });
    }
}
