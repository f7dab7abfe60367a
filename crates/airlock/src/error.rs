//! The one error path of the CLI (PRODUCT O4, O5).
//!
//! Every failure a command reports is a [`CommandError`]: a [`ErrorKind`] that decides the exit
//! code, a stable machine-readable `code` (`config.invalid`, `lock.busy`, …), one sentence of
//! cause and one line of next action. [`exit_code`] is the only place that maps kinds to exit
//! codes; it matches exhaustively so a new kind cannot silently get a wrong code.

use std::fmt;

pub use airlock_host::ErrorKind;
use airlock_host::HostError;

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

/// A failure as the user sees it: stable code, one sentence of cause, one line of next action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError {
    pub kind: ErrorKind,
    /// Stable identifier, `area.reason`; scripts match on it, so never rename one. Owned only
    /// when it travelled from another airlock process (a keeper's start failure).
    pub code: std::borrow::Cow<'static, str>,
    /// What went wrong. May hold several lines when several independent errors were found.
    pub message: String,
    /// The next action, one line.
    pub hint: Option<String>,
}

impl CommandError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            code: std::borrow::Cow::Borrowed(code),
            message: message.into(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, "usage.invalid", message)
    }

    pub fn internal(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, code, message)
    }

    pub fn exit_code(&self) -> i32 {
        exit_code(self.kind)
    }

    /// The `{"code","message","hint"}` object of the JSON error document (PRODUCT O2).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
        })
    }
}

/// A host-side failure as the user sees it: same kind, code, message and next action.
impl From<HostError> for CommandError {
    fn from(e: HostError) -> Self {
        Self {
            kind: e.kind,
            code: e.code,
            message: e.message,
            hint: e.hint,
        }
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
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
        let e = CommandError::usage("bad flag").with_hint("run `airlock --help`");
        let v = e.to_json();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["code", "hint", "message"]);
        assert_eq!(v["code"], "usage.invalid");
    }
}
