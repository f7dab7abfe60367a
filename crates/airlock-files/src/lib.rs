//! airlock-files: copying trees between the host and a sandbox (PRODUCT F1–F6).
//!
//! Both ends of a transfer live here, because they are the same code facing opposite ways:
//! [`send`] walks a source without following links (F2) and streams it in the wire format of
//! `airlock_protocol::transfer`; [`receive`] writes what arrives beneath a fresh staging entry,
//! never following anything the sender named, and publishes it with one rename (F3, F4, F6).
//! [`path`] checks paths while the command line is read (F5); [`resolve`] opens the directory
//! a transfer starts from, refusing links inside sandbox-writable directories. [`client`] is
//! the host's side of a stream, [`serve`] the sandbox's (the guest calls it after switching the
//! serving thread to the sandbox user).
//!
//! No `unsafe` here: every system call goes through `rustix`.

pub mod client;
pub mod error;
pub mod path;
pub mod progress;
pub mod receive;
pub mod remove;
pub mod resolve;
pub mod send;
pub mod serve;
pub mod wire;

pub use client::{connect, pull, push, Outcome};
pub use error::TransferError;
pub use path::{host_path, sandbox_path, CheckedPath, PathError};
pub use progress::{NoProgress, Progress};
pub use receive::{receive_tree, Target, STAGE_PREFIX};
pub use resolve::{ResolveError, Resolver};
pub use send::{send_tree, Source};
pub use wire::Wire;

/// Raises this process's soft open-files limit to its hard limit (at most 65,536): a tree
/// [`airlock_protocol::transfer::MAX_DEPTH`] deep keeps one descriptor per level open.
pub fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.map_or(65_536, |max| max.min(65_536));
    if limit.current.is_some_and(|cur| cur < want) {
        let _ignored = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: limit.maximum,
            },
        );
    }
}
