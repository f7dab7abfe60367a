//! Applying a policy or secret change to running sandboxes (`policy allow|deny`,
//! `secret set|rm`): each running sandbox's keeper is asked, over its control socket (0700
//! directory, peer uid checked by the keeper), to make its proxy reload; the answer is what the
//! command reports. Nothing is assumed: a keeper that does not answer is reported as such.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_core::names::SandboxName;

use crate::lifecycle::backend::{with_socket_path, SOCKET};
use crate::wire::{KeeperAnswer, MODE_RELOAD};

/// How long one keeper may take to answer (its proxy answers within its own bound).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// The outcome for one running sandbox.
#[derive(Debug)]
pub struct Reloaded {
    /// The sandbox.
    pub name: SandboxName,
    /// `Err(reason)` when the change could not be applied.
    pub result: Result<(), String>,
}

/// Asks every sandbox in `running` (name, runtime directory) to reload its policy and secrets.
pub fn reload_running(running: &[(SandboxName, PathBuf)]) -> Vec<Reloaded> {
    running
        .iter()
        .map(|(name, runtime_dir)| Reloaded {
            name: name.clone(),
            result: ask(&runtime_dir.join(SOCKET)),
        })
        .collect()
}

fn ask(socket: &Path) -> Result<(), String> {
    let io = |e: std::io::Error| format!("its keeper cannot be reached: {e}");
    let mut conn = with_socket_path(socket, |p| UnixStream::connect(p)).map_err(io)?;
    conn.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(io)?;
    conn.write_all(&[MODE_RELOAD]).map_err(io)?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line).map_err(io)?;
    if line.trim_end().is_empty() {
        return Err("its keeper closed the connection without an answer".to_owned());
    }
    match serde_json::from_str(line.trim_end()) {
        Ok(KeeperAnswer::Ok) => Ok(()),
        Ok(KeeperAnswer::Error { message }) => Err(message),
        Ok(KeeperAnswer::Started { .. }) | Err(_) => Err(format!(
            "its keeper answered {:?}, not a reload's answer",
            line.trim_end()
        )),
    }
}
