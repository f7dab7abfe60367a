//! Terminal I/O of the airlock client: the host terminal in raw mode with its settings put back
//! on every exit path ([`terminal`]), attaching it to a sandbox session ([`attach`]), streaming
//! one command of `run`/`exec` with signal relay ([`stream`]), Ctrl+C during `up` ([`interrupt`]), reading a secret with echo off
//! ([`secret_input`]), progress and Ctrl+C of a file transfer ([`transfer`]), and escaping text from outside airlock before it reaches the terminal
//! ([`escape`]).
//!
//! No argv, no exit codes: every failure is a typed error the binary maps to its exit status.
//! No `unsafe`: the termios and signal calls go through rustix, nix and signal-hook.

pub mod attach;
pub mod escape;
pub mod interrupt;
pub mod secret_input;
pub mod stream;
pub mod terminal;
pub mod transfer;

pub use escape::escape_untrusted;
