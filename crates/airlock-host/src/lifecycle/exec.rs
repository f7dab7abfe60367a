//! The host side of `airlock exec` (PRODUCT §2, O5), and the one way to ask a keeper something.
//!
//! Order of operations: [`ready_for_exec`] proves the sandbox `ready` (else exit 1 with the
//! next action) and reads its start request (the spec, for `-w` and the egress placeholders).
//! Attached, the verb connects through the backend right after the proof and reads the start
//! request ([`start_request`]) while the keeper and the guest open the stream, then streams;
//! detached, [`exec_detached`] hands the command to the keeper, which runs it and holds its
//! stream. Around an attached
//! command, [`OomWatch`] tells whether the OOM killer struck (a lost stream is then 137, 9.10).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use airlock_core::names::SandboxName;
use airlock_core::records::SandboxRecord;
use airlock_protocol::ExecRequest;

use crate::error::{ErrorKind, HostError};
use crate::lifecycle::backend::{with_socket_path, OomCounter, SOCKET};
use crate::lifecycle::Host;
use crate::run::limits::OutOfMemory;
use crate::wire::{KeeperAnswer, StartRequest, MODE_DETACHED, START_FILE};

/// One request to the keeper listening on `socket`: the mode byte, one JSON line; returns its
/// one reply line, trimmed. `code` names the failure to reach it (exit 1).
pub(crate) fn ask_keeper(
    socket: &Path,
    mode: u8,
    request: &impl serde::Serialize,
    code: &'static str,
) -> Result<String, HostError> {
    let unreachable = |e: std::io::Error| {
        HostError::new(
            ErrorKind::Failed,
            code,
            format!(
                "cannot reach the sandbox's keeper at {}: {e}",
                socket.display()
            ),
        )
        .with_hint("run `airlock status` to see the sandbox's health")
    };
    let mut conn = with_socket_path(socket, |p| UnixStream::connect(p)).map_err(unreachable)?;
    let mut line =
        serde_json::to_vec(request).map_err(|e| unreachable(std::io::Error::other(e)))?;
    line.push(b'\n');
    conn.write_all(&[mode]).map_err(unreachable)?;
    conn.write_all(&line).map_err(unreachable)?;
    let mut reply = String::new();
    BufReader::new(conn)
        .read_line(&mut reply)
        .map_err(unreachable)?;
    Ok(reply.trim().to_owned())
}

/// The record of `name` when it is ready, with the start request it was built from.
pub fn ready_for_exec(
    host: &Host,
    name: &SandboxName,
) -> Result<(SandboxRecord, StartRequest), HostError> {
    let record = crate::lifecycle::ready(host, name, "exec.not_ready")?;
    let start = start_request(&record)?;
    Ok((record, start))
}

/// The start request the ready sandbox of `record` was built from (its spec: `-w`, egress).
pub fn start_request(record: &SandboxRecord) -> Result<StartRequest, HostError> {
    let start_path = record.paths.state_dir.join(START_FILE);
    let start = std::fs::read(&start_path)
        .ok()
        .and_then(|b| crate::wire::decode(&b).ok())
        .ok_or_else(|| {
            HostError::internal(
                "exec.state",
                format!(
                    "cannot read the sandbox's start request {}",
                    start_path.display()
                ),
            )
            .with_hint("run `airlock down` and `airlock up` to rebuild the sandbox")
        })?;
    Ok(start)
}

/// Hands the command to the sandbox's keeper; returns its process id inside the sandbox (the
/// keeper answers once the guest started it). The refusal can quote the guest: the binary
/// escapes messages before printing them.
pub fn exec_detached(record: &SandboxRecord, request: &ExecRequest) -> Result<u32, HostError> {
    let socket = record.paths.runtime_dir.join(SOCKET);
    let reply = ask_keeper(&socket, MODE_DETACHED, request, "exec.detached")?;
    let (code, message, hint) = match serde_json::from_str(&reply) {
        Ok(KeeperAnswer::Started { pid }) => return Ok(pid),
        Ok(KeeperAnswer::Error { message }) => (
            "exec.detached",
            format!("the sandbox refused the command: {message}"),
            "run it without -d to see its output",
        ),
        Ok(KeeperAnswer::Ok) | Err(_) => (
            "exec.detached_reply",
            format!(
                "the sandbox's keeper gave no answer a detached command gets (reply {reply:?})"
            ),
            "run `airlock status`; if it names another airlock version: `airlock down`, then \
             `airlock up`",
        ),
    };
    Err(HostError::new(ErrorKind::Failed, code, message).with_hint(hint))
}

/// The sandbox's OOM-kill count before a command, to compare after it (its counter file is
/// found once).
pub struct OomWatch {
    counter: Option<OomCounter>,
    before: Option<u64>,
}

impl OomWatch {
    pub fn start(record: &SandboxRecord) -> Self {
        let counter = OomCounter::find(record);
        let before = counter.as_ref().and_then(OomCounter::read);
        Self { counter, before }
    }

    /// Whether the OOM killer ended processes of the sandbox since [`OomWatch::start`].
    pub fn since(&self, record: &SandboxRecord) -> Option<OutOfMemory> {
        match (
            self.before,
            self.counter.as_ref().and_then(OomCounter::read),
        ) {
            (Some(before), Some(after)) if after > before => Some(OutOfMemory {
                memory_mb: record.plan.memory_mb,
                kills: after - before,
            }),
            (Some(_) | None, Some(_) | None) => None,
        }
    }
}
