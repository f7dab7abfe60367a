//! How sessions are shown, shared by `sessions` and `status` (PRODUCT O1, O2): one line per
//! session in human output, one object per session in JSON. Names and commands come from the
//! sandbox: the printer escapes their control characters.

use airlock_core::records::utc_text;
use airlock_protocol::{SessionInfo, SessionState};

/// `main  running  1 client  started 2026-12-01T16:40:02Z  /bin/bash -l`.
pub fn line(info: &SessionInfo) -> String {
    let clients = match info.clients {
        1 => "1 client".to_owned(),
        n => format!("{n} clients"),
    };
    format!(
        "{}  {}  {clients}  started {}  {}",
        info.name,
        info.state.describe(),
        utc_text(info.started.saturating_mul(1000)),
        info.command.join(" ")
    )
}

/// The JSON object of one session.
pub fn json(info: &SessionInfo) -> serde_json::Value {
    let (state, exit_code, signal) = match info.state {
        SessionState::Running => ("running", None, None),
        SessionState::Exited { code } => ("exited", Some(code), None),
        SessionState::Signaled { signal } => ("signaled", None, Some(signal)),
    };
    serde_json::json!({
        "name": info.name,
        "command": info.command,
        "state": state,
        "exit_code": exit_code,
        "signal": signal,
        "clients": info.clients,
        "started": utc_text(info.started.saturating_mul(1000)),
        "pid": info.pid,
        "size": { "rows": info.size.rows, "cols": info.size.cols },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_protocol::WindowSize;

    fn info(state: SessionState, clients: u32) -> SessionInfo {
        SessionInfo {
            name: "main".into(),
            command: vec!["/bin/bash".into(), "-l".into()],
            state,
            clients,
            started: 86_400,
            pid: 7,
            size: WindowSize { rows: 24, cols: 80 },
        }
    }

    #[test]
    fn a_line_names_state_clients_start_and_command() {
        assert_eq!(
            line(&info(SessionState::Running, 1)),
            "main  running  1 client  started 1970-01-02T00:00:00Z  /bin/bash -l"
        );
        assert!(line(&info(SessionState::Exited { code: 3 }, 0)).contains("exited 3  0 clients"));
    }

    #[test]
    fn json_spells_out_the_exit_status() {
        let v = json(&info(SessionState::Signaled { signal: 9 }, 2));
        assert_eq!(
            (&v["state"], &v["signal"], &v["exit_code"], &v["clients"]),
            (
                &serde_json::json!("signaled"),
                &serde_json::json!(9),
                &serde_json::Value::Null,
                &serde_json::json!(2)
            )
        );
    }
}
