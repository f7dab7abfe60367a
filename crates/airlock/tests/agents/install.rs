//! A real agent CLI installed from its npm package (A1), started against a loopback stand-in
//! for its API: the request reaches the stand-in with the real key while the sandbox only ever
//! holds the placeholder (N5, N8).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Sandboxed;
use crate::common::TestEnv;

const REAL_KEY: &str = "sk-ant-api03-standin-real-value-0123456789";
const REPLY: &str = "STANDIN-REPLY-7731";

/// Whether the npm registry answers from this host; without it the test skips (fails in CI).
fn registry_reachable() -> bool {
    let ok = ("registry.npmjs.org", 443)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(5)).is_ok());
    if !ok {
        airlock_testkit::skip("needs registry.npmjs.org, which is not reachable");
    }
    ok
}

/// A stand-in for the Anthropic Messages API: answers every POST with one streamed text reply
/// and records each request's `x-api-key`.
fn standin() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&keys);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || serve(conn, &seen));
        }
    });
    (port, keys)
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<String>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    length = v.trim().parse().unwrap_or(0);
                }
                if k == "x-api-key" {
                    seen.lock().unwrap().push(v.trim().to_owned());
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let events = [
            ("message_start", r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}"#.to_owned()),
            ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned()),
            ("content_block_delta", format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{REPLY}"}}}}"#)),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#.to_owned()),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}"#.to_owned()),
            ("message_stop", r#"{"type":"message_stop"}"#.to_owned()),
        ];
        let sse: String = events
            .iter()
            .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
            .collect();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            sse.len()
        );
        if conn.write_all(head.as_bytes()).is_err() || conn.write_all(sse.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn claude_code_installed_from_npm_reaches_a_loopback_standin_with_the_real_key() {
    if !registry_reachable() {
        return;
    }
    let env = TestEnv::new();
    let (port, keys) = standin();
    let host = format!("api-standin.test:{port}");
    env.write_user_config(&format!(
        "agent = \"claude\"\n\n[network]\nallow = [\"{host}\"]\n\n[network.hosts]\n\"api-standin.test\" = \"127.0.0.1\"\n"
    ));
    let project = env.git_project("proj");
    let mut set = env.command(
        &project,
        &["secret", "set", "ANTHROPIC_API_KEY", "--host", &host],
    );
    let mut child = set
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{REAL_KEY}\n").as_bytes())
        .unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    let sb = Sandboxed {
        env: &env,
        dir: project,
    };
    let up = sb.run(&["up", "--no-attach"]);
    up.assert_code(0);
    assert!(
        up.stderr
            .contains("installed the agent from npm @anthropic-ai/claude-code"),
        "{}",
        up.stderr
    );
    let run = sb.run(&[
        "exec",
        "-e",
        &format!("ANTHROPIC_BASE_URL=http://{host}"),
        "--",
        "sh",
        "-c",
        "echo \"key=$ANTHROPIC_API_KEY\"; claude -p 'say hi'",
    ]);
    run.assert_code(0);
    assert!(run.stdout.contains(REPLY), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("key=airlock-secret-"), "{}", run.stdout);
    assert!(!run.stdout.contains(REAL_KEY));
    let keys = keys.lock().unwrap().clone();
    assert!(!keys.is_empty(), "the stand-in saw no request");
    assert!(keys.iter().all(|k| k == REAL_KEY), "{keys:?}");
    // The tool directory is read-only inside, and a second `up` installs nothing.
    assert_ne!(
        sb.exec("touch /var/lib/airlock/agents/claude/bin/poison")
            .code,
        Some(0)
    );
    let again = sb.run(&["up", "--no-attach"]);
    again.assert_code(0);
    assert!(
        !again.stderr.contains("installed the agent"),
        "{}",
        again.stderr
    );
    // The default session runs the agent with its catalogue arguments (S1, A1).
    let sessions = sb.run(&["sessions", "--json"]);
    sessions.assert_code(0);
    let doc = sessions.json();
    let main = doc["sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == "main"))
        .unwrap_or_else(|| panic!("no default session: {doc}"))
        .clone();
    assert_eq!(
        main["command"],
        serde_json::json!(["claude", "--dangerously-skip-permissions"]),
        "{main}"
    );
    assert_eq!(main["state"], "running", "{main}");
}
