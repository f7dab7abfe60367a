//! The one error path of the CLI (PRODUCT O4, O5).
//!
//! Every failure a command reports is an [`airlock_host::HostError`]: an [`ErrorKind`] that
//! decides the exit code, a stable machine-readable `code` (`config.invalid`, `lock.busy`, …),
//! one sentence of cause and one line of next action. The binary adds no error type of its
//! own: [`exit_code`] is the only place that maps kinds to exit codes, matching exhaustively so
//! a new kind cannot silently get a wrong code, and [`to_json`] is the error's JSON object.

pub use airlock_host::{ErrorKind, HostError};

use crate::output::{escape_lines, escape_untrusted};

/// Exit status for an error kind (PRODUCT O5).
pub fn exit_code(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::Failed => 1,
        ErrorKind::Usage | ErrorKind::Config => 2,
        ErrorKind::BackendUnavailable => 69,
        ErrorKind::Internal => 70,
        ErrorKind::Busy => 75,
        ErrorKind::Interrupted => 130,
    }
}

/// A failure whose message quotes what a sandbox or an archive chose (names, guest messages):
/// every control character, line breaks included, is escaped, so it stays one line.
pub fn untrusted(mut e: HostError) -> HostError {
    e.message = escape_untrusted(&e.message).into_owned();
    e
}

/// The `{"code","message","hint"}` object of the JSON error document (PRODUCT O2). Message and
/// hint can quote a sandbox or an archive: control characters are escaped (line breaks kept),
/// as on the terminal.
pub fn to_json(e: &HostError) -> serde_json::Value {
    serde_json::json!({
        "code": e.code,
        "message": escape_lines(&e.message),
        "hint": e.hint.as_deref().map(escape_lines),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_product_contract() {
        let table = [
            (ErrorKind::Failed, 1),
            (ErrorKind::Usage, 2),
            (ErrorKind::Config, 2),
            (ErrorKind::BackendUnavailable, 69),
            (ErrorKind::Internal, 70),
            (ErrorKind::Busy, 75),
            (ErrorKind::Interrupted, 130),
        ];
        for (kind, code) in table {
            assert_eq!(exit_code(kind), code, "{kind:?}");
        }
    }

    #[test]
    fn json_error_has_exactly_code_message_hint() {
        let e = HostError::usage("bad flag").with_hint("run `airlock --help`");
        let v = to_json(&e);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["code", "hint", "message"]);
        assert_eq!(v["code"], "usage.invalid");
    }

    #[test]
    fn a_json_error_message_cannot_carry_terminal_controls() {
        let e =
            HostError::internal("run.guest", "guest said \x1b[2J\nline two").with_hint("x\u{9b}y");
        let v = to_json(&e);
        assert_eq!(v["message"], "guest said \\x1b[2J\nline two");
        assert_eq!(v["hint"], "x\\x9by");
    }
}
