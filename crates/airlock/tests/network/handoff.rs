//! The guest's PID 1 hands each connection to 127.0.0.1:3128 over to the host proxy
//! (`SCM_RIGHTS`): the proxy itself serves the sandbox process's socket, a sandbox process
//! cannot hand the proxy descriptors of its own, and many connections at once all get through
//! under the same policy.

use super::*;
use crate::runtime::harness::{ok, Rt};

/// The proxy's `CONNECT` and one handed-over socket: prints `up` once the tunnel is open and
/// the inode of the sandbox-side socket (local 127.0.0.1:3128) is in `./handoff-inode`, then
/// holds the tunnel until `./handoff-done` appears (at most 60 s).
const HOLD_TUNNEL: &str = r#"
import os, socket, sys, time
port = int(sys.argv[1])
c = socket.create_connection(("127.0.0.1", 3128))
c.sendall(b"CONNECT web.test:%d HTTP/1.1\r\nHost: web.test:%d\r\n\r\n" % (port, port))
head = b""
while b"\r\n\r\n" not in head:
    head += c.recv(1)
assert head.startswith(b"HTTP/1.1 200"), head
mine = "%08X:%04X" % (0x0100007F, c.getsockname()[1])
inode = None
for line in open("/proc/net/tcp").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "0100007F:0C38" and f[2] == mine:
        inode = f[9]
open("handoff-inode", "w").write(inode)
print("up", flush=True)
for _ in range(600):
    if os.path.exists("handoff-done"):
        break
    time.sleep(0.1)
"#;

/// Host pids of the `airlock __proxy` children of this world.
fn proxy_pids(rt: &Rt) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.get(1).map(String::as_str) == Some("__proxy")
            && args
                .get(2)
                .is_some_and(|d| Path::new(d).starts_with(&rt.env.runtime_dir))
        {
            pids.push(pid);
        }
    }
    pids
}

fn holds_socket(pid: u32, inode: &str) -> bool {
    let want = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == &*want))
        })
        .unwrap_or(false)
}

#[test]
fn the_proxy_itself_holds_the_sandbox_processs_tcp_socket() {
    proxy_holds_the_socket(Rt::invoker());
}

#[test]
fn the_proxy_itself_holds_the_sandbox_processs_tcp_socket_as_an_unprivileged_user() {
    if let Some(rt) = Rt::unprivileged() {
        proxy_holds_the_socket(rt);
    }
}

fn proxy_holds_the_socket(rt: Rt) {
    let web = http_server(None);
    rt.env.write_user_config(&user_config(
        &[format!("web.test:{}", web.port())],
        None,
        "",
    ));
    std::fs::write(rt.project.join("hold.py"), HOLD_TUNNEL).unwrap();
    let mut child = rt.spawn_until_up(&format!("python3 hold.py {}", web.port()));
    let inode = std::fs::read_to_string(rt.project.join("handoff-inode")).unwrap();
    let proxies = proxy_pids(&rt);
    let held = proxies.iter().any(|p| holds_socket(*p, inode.trim()));
    std::fs::write(rt.project.join("handoff-done"), "").unwrap();
    let _ = child.wait();
    assert_eq!(proxies.len(), 1, "{proxies:?}");
    assert!(
        held,
        "the proxy {proxies:?} does not hold the sandbox's socket {inode}"
    );
}

/// Inside the sandbox: asks the proxy for a handoff channel as an ordinary process, passing a
/// loopback TCP connection it accepted and a pipe, then sends a request on that connection.
const FORGE: &str = r#"
import array, os, socket, sys
port = int(sys.argv[1])
HELLO = b"\0airlock-handoff 1\n"
def ask(fd):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("/run/airlock/proxy.sock")
    s.settimeout(10)
    try:
        s.sendall(HELLO)
        s.sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        return s.recv(1)
    except (BrokenPipeError, ConnectionResetError):
        return b""  # closed before or with our message unread: refused all the same
    except Exception as e:
        return repr(e)
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
c = socket.create_connection(l.getsockname())
a, _ = l.accept()
print("tcp", ask(a.fileno()))
r, w = os.pipe()
print("pipe", ask(r))
a.close()
c.sendall(b"GET http://web.test:%d/ HTTP/1.1\r\nHost: web.test:%d\r\n\r\n" % (port, port))
c.settimeout(10)
try:
    got = c.recv(100)
except Exception as e:
    got = repr(e).encode()
print("served", b"HTTP" in got)
"#;

#[test]
fn a_sandbox_process_cannot_hand_its_own_descriptors_to_the_proxy() {
    let rt = Rt::invoker();
    let web = http_server(None);
    rt.env.write_user_config(&user_config(
        &[format!("web.test:{}", web.port())],
        None,
        "",
    ));
    std::fs::write(rt.project.join("forge.py"), FORGE).unwrap();
    let expected = "tcp b''\npipe b''\nserved False\n";
    let run = rt.sh(&[], &format!("python3 forge.py {}", web.port()));
    assert_eq!(ok(&run), expected, "{}", run.stderr);
    // In-sandbox root in a PID namespace of its own is its init, one level too deep.
    if rt.root_available() {
        let run = rt.sh(
            &["--root"],
            &format!(
                "unshare --pid --fork --kill-child python3 forge.py {}",
                web.port()
            ),
        );
        assert_eq!(ok(&run), expected, "{}", run.stderr);
    }
    assert!(
        web.seen.all().is_empty(),
        "a forged handoff reached the server"
    );
}

#[test]
fn many_concurrent_connections_all_pass_the_proxy_and_are_audited() {
    let rt = Rt::invoker();
    let web = http_server(None);
    rt.env.write_user_config(&user_config(
        &[format!("web.test:{}", web.port())],
        None,
        "",
    ));
    let run = rt.sh(
        &[],
        &format!(
            "for i in $(seq 150); do echo url=http://web.test:{p}/$i; echo output=/dev/null; done \
             > urls; curl -sS -Z --parallel-max 75 -m 60 -K urls -w '%{{http_code}}\\n' \
             | sort | uniq -c",
            p = web.port()
        ),
    );
    assert_eq!(ok(&run).trim(), "150 200", "{}", run.stderr);
    assert_eq!(web.seen.all().matches("GET /").count(), 150);
    let logs = rt.env.state_home().join("airlock/run-logs");
    let log = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path().join("audit.jsonl")).unwrap_or_default())
        .collect::<String>();
    assert_eq!(log.matches("\"status\":200").count(), 150, "{log}");
}
