//! Integration tests of airlock-config's public API (one test binary per crate).

mod agent_defs;
mod agent_sync;
mod common;
mod diagnostics;
mod effective;
mod git_worktree;
mod mounts;
mod policy;
mod ports;
mod protect;
mod reference;
mod sandbox_git;
mod schema;
mod toolchain;
mod trust;
mod untrusted;
