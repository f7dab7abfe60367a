//! How a host-side failure travels to the binary (PRODUCT O4, O5).
//!
//! Every failure of this crate is a [`HostError`]: an [`ErrorKind`] that classifies it, a
//! stable machine-readable `code` (`config.invalid`, `lock.busy`, …), one sentence of cause and
//! one line of next action. This crate never decides an exit code: the binary maps each
//! [`ErrorKind`] to one, in one exhaustive match.

use std::fmt;

/// What class of failure happened; decides the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The operation ran and failed, or the sandbox is not ready (exit 1).
    Failed,
    /// The command line is wrong (exit 2). Nothing was changed.
    Usage,
    /// The configuration is wrong or the project state forbids the command (exit 2).
    Config,
    /// This host cannot run the backend (exit 69, `EX_UNAVAILABLE`).
    BackendUnavailable,
    /// An internal or infrastructure failure: I/O, corrupt state (exit 70, `EX_SOFTWARE`).
    Internal,
    /// Another command holds the lock (exit 75, `EX_TEMPFAIL`).
    Busy,
    /// The user interrupted the command (exit 130 = 128 + SIGINT). Raised by lifecycle
    /// commands on Ctrl+C (PRODUCT L7).
    Interrupted,
}

/// A failure as the user sees it: stable code, one sentence of cause, one line of next action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    pub kind: ErrorKind,
    /// Stable identifier, `area.reason`; scripts match on it, so never rename one. Owned only
    /// when it travelled from another airlock process (a keeper's start failure).
    pub code: std::borrow::Cow<'static, str>,
    /// What went wrong. May hold several lines when several independent errors were found.
    pub message: String,
    /// The next action, one line.
    pub hint: Option<String>,
}

impl HostError {
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
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A keeper's start failure as it reaches `up`: the class it reported decides the kind; the
/// code, message and hint are the ones the keeper's own error carried.
pub fn from_start_failure(f: airlock_core::backend::StartFailure) -> HostError {
    use airlock_core::backend::FailureClass;
    let kind = match f.class {
        FailureClass::Unavailable => ErrorKind::BackendUnavailable,
        FailureClass::Refused => ErrorKind::Failed,
        FailureClass::Config => ErrorKind::Config,
        FailureClass::Internal => ErrorKind::Internal,
    };
    HostError {
        kind,
        code: std::borrow::Cow::Owned(f.code),
        message: f.message,
        hint: f.hint,
    }
}

/// A host failure the keeper reports to `up` ([`from_start_failure`] is the way back). The
/// kinds a start cannot produce (usage, busy, interrupted) travel as refusals.
pub fn to_start_failure(e: HostError) -> airlock_core::backend::StartFailure {
    use airlock_core::backend::FailureClass;
    let class = match e.kind {
        ErrorKind::BackendUnavailable => FailureClass::Unavailable,
        ErrorKind::Config => FailureClass::Config,
        ErrorKind::Internal => FailureClass::Internal,
        ErrorKind::Failed | ErrorKind::Usage | ErrorKind::Busy | ErrorKind::Interrupted => {
            FailureClass::Refused
        }
    };
    airlock_core::backend::StartFailure {
        class,
        code: e.code.into_owned(),
        message: e.message,
        hint: e.hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the keeper reports is what `up` shows: same kind (so the same exit status), code,
    /// message and hint, for every kind a start can fail with.
    #[test]
    fn a_keeper_failure_keeps_its_kind_code_and_hint_across_the_wire() {
        for kind in [
            ErrorKind::BackendUnavailable,
            ErrorKind::Config,
            ErrorKind::Internal,
            ErrorKind::Failed,
        ] {
            let sent = HostError::new(kind, "backend.namespaces", "no namespaces")
                .with_hint("run `airlock doctor`");
            let line = serde_json::to_string(&to_start_failure(sent.clone())).unwrap();
            let got = from_start_failure(serde_json::from_str(&line).unwrap());
            assert_eq!(got, sent, "{line}");
        }
    }
}
